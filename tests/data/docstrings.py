"""Land a labelled text set in a lake: standard-library docstrings by module family.

    python -m tests.data.docstrings --lake file://$PWD/.lake [--day 2024-02-01 ...]

No labelled text set ships inside a PyPI wheel without a download, so the corpus is the
one every Python carries: the docstring of each public function and class of a few
standard-library modules, labelled by the family its module belongs to (`text`,
`files`, `numbers`, `concurrency`). One CSV per day (`Name`, `Family`, `Doc`; a docstring
keeps its newlines, quoted), object i on day `DAYS[i % len(DAYS)]`, `_SUCCESS` last;
`extra_rows` are appended to a day as given.

A WordPiece tokenizer (Hugging Face `tokenizers`, the file format a model ships with) is
trained on the same docstrings and written to `<lake>/tokenizers/docstrings/tokenizer.json`,
where the spec `tests/data/pipelines/docstrings.yaml` names it. `tokenizers`' trainer
orders equal-count merges differently from one process to the next, so two landings
may write different vocabularies: a test lands once and reads that file throughout
(lakeprep's own trainer, `lakeprep_contracts.subword_training`, is deterministic).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterable, Sequence

from lakeprep_airflow import lake_fs
from tests.data import daily_csv

log = logging.getLogger(__name__)

DAYS = ("2024-02-01", "2024-02-02", "2024-02-03")
HEADER = ("Name", "Family", "Doc")
FAMILIES = {
    "text": ("string", "re", "textwrap", "difflib", "html"),
    "files": ("os", "pathlib", "shutil", "glob", "tempfile", "filecmp", "fnmatch"),
    "numbers": ("statistics", "fractions", "random", "decimal"),
    "concurrency": ("threading", "queue", "sched", "concurrent.futures", "selectors"),
}
TOKENIZER_PATH = ("tokenizers", "docstrings", "tokenizer.json")
VOCAB_SIZE = 600
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")  # [PAD] first: lakeprep pads with id 0


def shipped_rows() -> list[list[str]]:
    """`[module.name, family, docstring]` of each public callable a family's modules define.

    Only objects whose `__module__` is the module itself (not what it imports), in name
    order, so the rows are the same on every run of one Python version.
    """
    rows = []
    for family, modules in FAMILIES.items():
        for module_name in modules:
            module = importlib.import_module(module_name)
            for name, obj in sorted(vars(module).items()):
                if (
                    name.startswith("_")
                    or not callable(obj)
                    or getattr(obj, "__module__", None) != module_name
                ):
                    continue
                doc = inspect.getdoc(obj)
                if doc:
                    rows.append([f"{module_name}.{name}", family, doc])
    return rows


def partitions(extra_rows: daily_csv.Rows | None = None) -> dict[str, str]:
    """Day -> that day's CSV text: the header, its docstrings, then its `extra_rows`."""
    return daily_csv.partitions(HEADER, shipped_rows(), DAYS, extra_rows)


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> bytes:
    """A BERT-style WordPiece tokenizer.json trained on `texts` (lowercased, `[CLS] ... [SEP]`)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", tokenizer.token_to_id("[SEP]")), ("[CLS]", tokenizer.token_to_id("[CLS]"))
    )
    return tokenizer.to_str().encode("utf-8")


def land(
    lake_root: str,
    days: Iterable[str] | None = None,
    *,
    extra_rows: daily_csv.Rows | None = None,
    webhdfs_conn_id: str = "webhdfs_default",
) -> dict[str, int]:
    """Land the given days (default: all) under `<lake>/raw/docstrings/` and the tokenizer
    file; return rows per day."""
    fs, root = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)
    fs.write_bytes(lake_fs.join(root, *TOKENIZER_PATH), train_tokenizer(doc for _, _, doc in shipped_rows()))
    available = partitions(extra_rows)
    return daily_csv.land(lake_root, "docstrings", available, days, webhdfs_conn_id=webhdfs_conn_id)


def main(argv: Sequence[str] | None = None) -> None:
    daily_csv.main(__doc__, DAYS, land, argv)


if __name__ == "__main__":
    main()
