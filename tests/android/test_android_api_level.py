"""The app and client-core keep to what Android 8.0 (API 26, the app's minSdk) runs.

There is no Android SDK here, so the Java build compiles against JDK 17, which
has methods a phone before API 33-36 lacks; the app's core-library
desugaring backports only part of them (List.of/copyOf, streams, java.time),
not java.nio.file or the Java 11+ String and stream additions. A call of one
of those compiles, passes every JVM test, and throws NoSuchMethodError on the
lab's phones. This test lists the ones found in this code base once, so none
comes back.
"""

from __future__ import annotations

import re

import pytest
from repository import ROOT

SOURCES = [ROOT / "android" / "client-core" / "src" / "main" / "java", ROOT / "android" / "app" / "src" / "main" / "java"]

# A call, and the API level that brought it to Android.
MISSING_BEFORE = {
    r"(?<!Collectors)\.toList\(\)": "Stream.toList (API 34)",
    r"\bPath\.of\(": "Path.of (API 26 has Paths.get only)",
    r"\bFiles\.readString\(": "Files.readString (API 36)",
    r"\bFiles\.writeString\(": "Files.writeString (API 36)",
    r"\.isBlank\(\)": "String.isBlank (API 33)",
    r"\.strip\(\)": "String.strip (API 33)",
    r"\.transferTo\(": "InputStream.transferTo (API 33)",
    r"\bInputStream\.nullInputStream\(": "InputStream.nullInputStream (API 33)",
    r"\bString\.formatted\(|\.formatted\(": "String.formatted (API 34)",
}


def _java_files():
    return sorted(p for root in SOURCES for p in root.rglob("*.java"))


def test_the_sources_are_found():
    assert len(_java_files()) > 30


@pytest.mark.parametrize("pattern", MISSING_BEFORE, ids=MISSING_BEFORE.get)
def test_no_call_a_phone_at_the_min_sdk_lacks(pattern):
    found = []
    for path in _java_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("//", 1)[0]
            if code.lstrip().startswith("*"):
                continue  # javadoc may name the API it avoids
            if re.search(pattern, code):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, f"{MISSING_BEFORE[pattern]} is missing on the app's older phones:\n" + "\n".join(found)
