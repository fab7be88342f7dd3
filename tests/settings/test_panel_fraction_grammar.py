"""The panel's fraction field takes what ``%gpumem fraction F`` takes: one table of cases,
labextension/test/fraction-cases.json, is read here against the magic's parser and by the
panel's node tests against its own (labextension/src/allocatorSettings.ts, parseFraction)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_gpumem.settings.apply import SettingsError, coerce_setting

CASES = json.loads((Path(__file__).parents[2] / "labextension" / "test" / "fraction-cases.json").read_text())["cases"]


@pytest.mark.parametrize(("text", "want"), CASES, ids=[repr(text) for text, _ in CASES])
def test_the_magic_reads_each_case_as_the_panel_does(text, want):
    if want is None:
        with pytest.raises(SettingsError, match="fraction"):
            coerce_setting("fraction", text)
    else:
        assert coerce_setting("fraction", text) == (want, None)
