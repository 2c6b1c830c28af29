"""Train a small text classifier outside stackcost and save it as users save theirs, to score it
with `stackcost heldout hf:./OUT/model --data OUT/test.csv` and time it with
`stackcost run hf:./OUT/model`.

The labelled set: which package of Python's standard library a snippet of its source comes
from (asyncio, email, unittest or xml). Every machine that runs stackcost has it, nothing is
downloaded, it is text people wrote (code, comments, docstrings), and its labels are facts,
not annotations. Files are split by a hash of their path (one in five held out), so a test
snippet never comes from a file the model trained on.

No pretrained weights can be fetched here, so the BERT-shaped model (two layers, width 64)
learns from scratch on the training snippets: what stackcost is given is what a user's
fine-tuning run leaves, `save_pretrained`'s folder with its config's id2label, its weights
and its own WordPiece tokenizer.

    .venv/bin/python examples/text_classifier.py OUT [--epochs 3] [--per-class 600]

writes OUT/model/, OUT/train.csv and OUT/test.csv (columns text, label), and prints the
held-out accuracy eager reaches.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sysconfig
from pathlib import Path

PACKAGES = ("asyncio", "email", "unittest", "xml")
HELD_OUT_EVERY = 5  # a file whose path hashes to 0 mod this is test text
SNIPPET_CHARS = 240  # about 60-100 tokens: within the model's 256 positions
POSITIONS = 256


def snippets(per_class: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, test) lists of (snippet, package): consecutive non-blank lines of each
    package's sources, joined up to SNIPPET_CHARS, at most `per_class` of each per split."""
    root = Path(sysconfig.get_path("stdlib"))
    train: list[tuple[str, str]] = []
    test: list[tuple[str, str]] = []
    for package in PACKAGES:
        files = sorted((root / package).rglob("*.py"))
        files = [f for f in files if "test" not in f.relative_to(root / package).parts[:-1]]
        found: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
        for f in files:
            held_out = hashlib.sha256(f.relative_to(root).as_posix().encode()).digest()[0]
            chunk = ""
            for line in f.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                chunk = f"{chunk}\n{line.strip()}" if chunk else line.strip()
                if len(chunk) >= SNIPPET_CHARS:
                    found[held_out % HELD_OUT_EVERY == 0].append((chunk[:SNIPPET_CHARS], package))
                    chunk = ""
        train += found[False][:per_class]
        test += found[True][:per_class]
    return train, test


def write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--per-class", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    import transformers
    from tokenizers import BertWordPieceTokenizer

    train, test = snippets(args.per_class)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "train.csv", train)
    write_csv(args.out / "test.csv", test)
    model_dir = args.out / "model"
    model_dir.mkdir(exist_ok=True)

    wordpiece = BertWordPieceTokenizer(lowercase=False)
    wordpiece.train_from_iterator([t for t, _ in train], vocab_size=2048, min_frequency=2)
    # BERT's own tokenizer class over the learnt vocabulary: it frames each text as
    # [CLS] text [SEP], and the folder reloads as the same class.
    tokenizer = transformers.BertTokenizer(vocab=wordpiece.get_vocab(), do_lower_case=False)
    labels = {name: i for i, name in enumerate(PACKAGES)}
    torch.manual_seed(args.seed)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=POSITIONS, num_labels=len(PACKAGES),
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        id2label=dict(enumerate(PACKAGES)), label2id=labels,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train), generator=generator).tolist()
        for start in range(0, len(order), 32):
            batch = [train[i] for i in order[start : start + 32]]
            enc = tokenizer([t for t, _ in batch], padding=True, return_tensors="pt")
            target = torch.tensor([labels[y] for _, y in batch])
            loss = model(**enc, labels=target).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: last loss {loss.item():.3f}")
    model.eval()
    right = 0
    with torch.inference_mode():
        for start in range(0, len(test), 64):
            batch = test[start : start + 64]
            enc = tokenizer([t for t, _ in batch], padding=True, return_tensors="pt")
            guess = model(**enc).logits.argmax(-1).tolist()
            right += sum(g == labels[y] for g, (_, y) in zip(guess, batch, strict=True))
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(
        f"saved {model_dir}: {len(train)} training and {len(test)} held-out snippets, "
        f"held-out accuracy {right / len(test):.1%} (eager fp32)"
    )


if __name__ == "__main__":
    main()
