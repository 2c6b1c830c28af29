"""The architecture x rung matrix: tiny checkpoint folders of each task, written by
`save_pretrained`, measured through the CLI as a user's folder is, and the compatibility
table the docs show, rendered from what that run stored.

`tests/zoo/test_architectures.py` runs it and holds `docs/compatibility.md` to it. After a
change that moves a cell, write the table again from a fresh measurement:

    .venv/bin/python -m tests.zoo.architectures docs/compatibility.md
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNGS = ("eager", "onnxruntime", "openvino")
DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
# Sizes small enough for a test: a decoder's prompt and generated tokens.
PROMPT_LEN, NEW_TOKENS = 8, 4

_BERT = dict(
    vocab_size=256, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=64,
)  # fmt: skip
# A vocabulary of 256: onnxruntime-genai's builder is `wrong` at 64 or 128 ids (test_checkpoint).
_DECODER = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
)  # fmt: skip
_GPT2 = dict(vocab_size=256, n_embd=32, n_layer=1, n_head=2, n_positions=128)


@dataclass(frozen=True)
class Architecture:
    """One folder: the transformers class saved, its config class and fields."""

    folder: str
    head_class: str
    config_class: str
    config: dict[str, Any]

    @property
    def decoder(self) -> bool:
        return self.head_class.endswith(("ForCausalLM", "LMHeadModel"))


ARCHITECTURES = (
    Architecture("llama", "LlamaForCausalLM", "LlamaConfig", _DECODER),
    Architecture("qwen2", "Qwen2ForCausalLM", "Qwen2Config", _DECODER),
    Architecture("gpt2", "GPT2LMHeadModel", "GPT2Config", _GPT2),
    Architecture(
        "bert-sequence", "BertForSequenceClassification", "BertConfig", {**_BERT, "num_labels": 3}
    ),
    Architecture(
        "gpt2-sequence", "GPT2ForSequenceClassification", "GPT2Config", {**_GPT2, "num_labels": 2}
    ),
    Architecture(
        "roberta-token",
        "RobertaForTokenClassification",
        "RobertaConfig",
        # RoBERTa numbers positions from its padding id + 1: 66 entries hold 64 tokens.
        {**_BERT, "max_position_embeddings": 66, "num_labels": 5},
    ),
    Architecture(
        "distilbert-qa",
        "DistilBertForQuestionAnswering",
        "DistilBertConfig",
        dict(
            vocab_size=256, dim=32, n_layers=1, n_heads=2, hidden_dim=64, max_position_embeddings=64
        ),
    ),  # fmt: skip
    Architecture("bert-masked", "BertForMaskedLM", "BertConfig", _BERT),
    Architecture(
        "vit",
        "ViTForImageClassification",
        "ViTConfig",
        dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
            num_labels=4,
        ),
    ),  # fmt: skip
    Architecture(
        "convnext",
        "ConvNextForImageClassification",
        "ConvNextConfig",
        dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=32, num_labels=3),
    ),
    Architecture(
        "wav2vec2",
        "Wav2Vec2ForSequenceClassification",
        "Wav2Vec2Config",
        dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            conv_dim=[16, 16],
            conv_kernel=[10, 3],
            conv_stride=[5, 2],
            num_feat_extract_layers=2,
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2,
            num_labels=3,
        ),
    ),  # fmt: skip
    Architecture(
        "t5",
        "T5ForConditionalGeneration",
        "T5Config",
        dict(vocab_size=256, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16),
    ),
    Architecture(
        "bart",
        "BartForConditionalGeneration",
        "BartConfig",
        dict(
            vocab_size=256,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
        ),
    ),  # fmt: skip
)


def save(root: Path) -> dict[str, Path]:
    """Every architecture saved by `save_pretrained` under `root`, its weights moved off
    transformers' init so only loading the folder reproduces them."""
    import torch
    import transformers

    folders = {}
    for arch in ARCHITECTURES:
        torch.manual_seed(1)
        config = getattr(transformers, arch.config_class)(**arch.config)
        model = getattr(transformers, arch.head_class)(config)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        folders[arch.folder] = root / arch.folder
        model.save_pretrained(folders[arch.folder])
    return folders


def measure(folders: dict[str, Path], db: Path) -> int:
    """Two sweeps through the CLI into `db`: every folder's forward pass on RUNGS, then
    the decoders' generation. The worse exit code."""
    from stackcost.cli import main

    # The matrix asks whether outputs match, not how fast: a repetition that other processes
    # disturbed (a parallel test lane) is kept rather than retried, and it counts as
    # verified, as does one whose CI missed its target on a noisy machine (TIMING_ONLY).
    common = ["--backends", ",".join(RUNGS), "--threads", "1", "--repeats", "1",
              "--min-time", "0", "--on-disturbed", "keep", "--db", str(db), "--quiet"]  # fmt: skip
    names = [f"hf:{folders[a.folder]}" for a in ARCHITECTURES]
    decoders = [f"hf:{folders[a.folder]}" for a in ARCHITECTURES if a.decoder]
    infer = main(["sweep", "--models", ",".join(names), "--batch-size", "2", *common])
    generate = main(
        ["sweep", "--models", ",".join(decoders), "--scenario", "generate",
         "--prompt-len", str(PROMPT_LEN), "--new-tokens", str(NEW_TOKENS),
         "--batch-size", "1", *common]
    )  # fmt: skip
    return max(infer, generate)


# Statuses that judge a repetition's timing only (other processes used the cores; its CI
# missed the target before the time cap): its outputs were still compared with eager's.
TIMING_ONLY = ("disturbed", "unstable")


@dataclass(frozen=True)
class Cell:
    status: str
    reason: str
    outputs: tuple[str, ...]  # the outputs verified against eager fp32, by name


def stored(db: Path, folders: dict[str, Path]) -> dict[tuple[str, str, str], Cell]:
    """(folder, mode, rung) -> what the run stored; a folder's path is shown by its name."""
    by_model = {f"hf:{path.resolve()}": name for name, path in folders.items()}
    out = {}
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT c.model, c.mode, c.backend, r.status, r.reason, r.result_json"
            " FROM repetitions r JOIN cells c ON c.id = r.cell_id"
        ).fetchall()
    for model, mode, backend, status, reason, result in rows:
        verification = json.loads(result).get("verification") or {}
        names = tuple(o["name"] for o in verification.get("outputs", []) if o.get("ok"))
        folder = by_model[model]
        outputs = verification.get("outputs", [])
        if status in TIMING_ONLY and outputs and all(o.get("ok") for o in outputs):
            status, reason = "ok", ""  # its timing is not trusted; its verification stands
        text = (reason or "").replace(str(folders[folder].resolve()), folder)
        out[folder, mode, backend] = Cell(status, text, names)
    return out


def tasks(folders: dict[str, Path]) -> dict[str, str]:
    """Each folder's task as stackcost reads it from the checkpoint (zoo/tasks.py)."""
    from stackcost.runspec.run import model_ref
    from stackcost.zoo import workload_of

    return {
        name: str(workload_of(model_ref(f"hf:{path}")).params.get("head", "base"))
        for name, path in folders.items()
    }


def render(cells: dict[tuple[str, str, str], Cell], task_of: dict[str, str]) -> str:
    """The compatibility table, as docs/compatibility.md holds it."""
    notes: list[str] = []

    def shown(cell: Cell | None) -> str:
        if cell is None:
            return "—"
        if cell.status == "ok":
            return "verified"
        notes.append(cell.reason)
        return f"{cell.status} [{len(notes)}]"

    head = ["architecture (saved class)", "task", "outputs verified"]
    head += [f"{r}" for r in RUNGS] + [f"generate: {r}" for r in RUNGS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arch in ARCHITECTURES:
        infer = [cells.get((arch.folder, "infer", r)) for r in RUNGS]
        generate = [cells.get((arch.folder, "generate", r)) for r in RUNGS]
        outputs = next((c.outputs for c in infer if c is not None and c.outputs), ())
        row = [arch.head_class, task_of[arch.folder], ", ".join(outputs) or "—"]
        row += [shown(c) for c in infer]
        row += [shown(c) if arch.decoder else "n/a" for c in generate]
        lines.append("| " + " | ".join(row) + " |")
    out = [
        "# Architectures and rungs",
        "",
        "Which saved heads run on which rung. Each row is a checkpoint folder written by",
        "transformers' `save_pretrained` (a tiny config of that class, its own weights), run",
        "as `stackcost run hf:./folder` runs yours: its task is read from",
        "`config.architectures`, every output is compared with eager fp32's, and decoders also",
        "generate (`--scenario generate`). *verified*: the rung's outputs matched eager fp32's",
        "within the fp32 tolerance; *unsupported*: the rung has no path for it (the note says",
        "why). The table is written from the test that runs this matrix",
        "(`tests/zoo/test_architectures.py`); to write it again:",
        "",
        "    .venv/bin/python -m tests.zoo.architectures docs/compatibility.md",
        "",
        *lines,
        "",
    ]
    out += [f"[{i}] {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """Measure the matrix in a scratch folder and write its table to argv[0]."""
    target = Path(argv[0]) if argv else DOC
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folders = save(root)
        measure(folders, root / "matrix.db")
        text = render(stored(root / "matrix.db", folders), tasks(folders))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
