"""Train a small GPT-2 outside stackcost and save it as users save theirs, to score it with
`stackcost heldout hf:./OUT/model --data OUT/test.txt` (perplexity on every generating rung)
and time it with `stackcost run hf:./OUT/model --scenario generate`.

The text: Python's standard library (every machine that runs stackcost has it; nothing is
downloaded). Files are split by a hash of their path, one in ten held out: OUT/test.txt is
held-out files only, never trained on. The tokenizer is a byte-level BPE learnt from the
training files (GPT-2's own kind), saved beside the model with its end-of-text token.

    .venv/bin/python examples/text_decoder.py OUT [--steps 600] [--context 128]

writes OUT/model/ (save_pretrained: GPT2LMHeadModel's config, weights, tokenizer) and
OUT/test.txt, and prints the held-out loss eager reaches.
"""

from __future__ import annotations

import argparse
import hashlib
import sysconfig
from pathlib import Path

HELD_OUT_EVERY = 10
SKIPPED = {"site-packages", "test", "tests", "idle_test"}
TRAIN_CHARS = 3_000_000  # enough text for a few hundred steps of 16 x 128 tokens
TEST_CHARS = 200_000
END = "<|endoftext|>"


def texts() -> tuple[list[str], list[str]]:
    """(training, held-out) file texts of the standard library, in a fixed order."""
    root = Path(sysconfig.get_path("stdlib"))
    train: list[str] = []
    test: list[str] = []
    for f in sorted(root.rglob("*.py")):
        relative = f.relative_to(root)
        if SKIPPED.intersection(relative.parts[:-1]):
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        digest = hashlib.sha256(relative.as_posix().encode()).digest()[0]
        (test if digest % HELD_OUT_EVERY == 0 else train).append(text)
    return train, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    train, test = texts()
    model_dir = args.out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    held_out = "\n".join(test)[:TEST_CHARS]
    (args.out / "test.txt").write_text(held_out, encoding="utf-8")

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, special_tokens=[END], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    bpe.train_from_iterator(train, trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=END, bos_token=END
    )
    end = tokenizer.eos_token_id
    stream: list[int] = []
    chars = 0
    for text in train:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
        chars += len(text)
        if chars > TRAIN_CHARS:
            break
    blocks = torch.tensor(stream[: len(stream) // (args.context + 1) * (args.context + 1)])
    blocks = blocks.view(-1, args.context + 1)

    torch.manual_seed(args.seed)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_embd=128, n_layer=2, n_head=4,
        n_positions=2 * args.context, bos_token_id=end, eos_token_id=end,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    for step in range(args.steps):
        rows = torch.randint(len(blocks), (16,), generator=generator)
        batch = blocks[rows]
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if (step + 1) % 100 == 0:
            print(f"step {step + 1}: loss {loss.item():.3f}")
    model.eval()
    ids = tokenizer(held_out, add_special_tokens=False)["input_ids"]
    ids = ids[: len(ids) // args.context * args.context][: 64 * args.context]
    with torch.inference_mode():
        test_loss = model(
            input_ids=torch.tensor(ids).view(-1, args.context),
            labels=torch.tensor(ids).view(-1, args.context),
        ).loss
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(
        f"saved {model_dir}: {len(blocks)} training blocks, held-out loss {test_loss.item():.3f} "
        f"(perplexity {test_loss.exp().item():.1f}, eager fp32, vocabulary {len(tokenizer)})"
    )


if __name__ == "__main__":
    main()
