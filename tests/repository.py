"""Where the repository's files are, for tests that read its docs, examples or golden frames."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden" / "protocol"
