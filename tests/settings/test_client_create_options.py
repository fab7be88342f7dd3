"""jax.config's ``jax_pjrt_client_create_options`` wins over the environment, and status says so.

- jax/_src/xla_bridge.py (jax-ml/jax at jax-v0.10.2 and jax-v0.11.0): ``make_pjrt_c_api_client``
  does ``updated_options.update(options)`` (the CUDA plugin's options, which
  ``generate_pjrt_gpu_plugin_options`` builds from the environment) and then
  ``updated_options.update(_options_from_jax_configs(plugin_name))``: the config comes last.
  ``_options_from_jax_configs`` splits a string on ``;`` and each part on ``:``, raising
  ``RuntimeError("Multiple ':' separators ...")`` for a part that is not ``key:value``; a dict
  is used as given. Plugins register with ``fail_quietly=False``, so that error reaches the user.
- jax/_src/config.py: ``string_or_object_state`` takes its default from the upper-cased name,
  ``JAX_PJRT_CLIENT_CREATE_OPTIONS``, when jax is imported.
- openxla/xla xla/pjrt/c/pjrt_c_api_gpu_internal.cc, ``PJRT_Client_Create``: option types are
  checked (``allocator`` kString, ``memory_fraction`` kFloat, ``preallocate`` kBool), so a
  string's ``preallocate:false`` stops the CUDA client from being created.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jupyter_gpumem.core.readings import AllocatorSettings, NotAvailable
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.settings.apply import BackendStartedError, SettingsError, validate
from jupyter_gpumem.settings.client_create_options import parse
from jupyter_gpumem.settings.status import status
from jupyter_gpumem.sources import jax_backend

pytestmark = pytest.mark.jax_versions

NO_NVML = NotAvailable("no_library", "synthetic: no NVML in this test")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC",
        "TF_GPU_ALLOCATOR",
        "JAX_PJRT_CLIENT_CREATE_OPTIONS",
    ):
        monkeypatch.delenv(var, raising=False)


def config_holds(monkeypatch, value) -> None:
    """jax.config's create options hold ``value`` for this test."""
    monkeypatch.setattr(jax_backend, "pjrt_create_options", lambda env=None: value)


def _by_name(report) -> dict:
    return {s.name: s for s in report.settings}


# --- parsed as xla_bridge parses it ------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, options, error",
    [
        (None, {}, None),
        ("", {}, None),
        ("allocator:cuda_async", {"allocator": "cuda_async"}, None),
        ("allocator:cuda_async;preallocate:false", {"allocator": "cuda_async", "preallocate": "false"}, None),
        ({"memory_fraction": 0.5, "preallocate": False}, {"memory_fraction": 0.5, "preallocate": False}, None),
        (
            "allocator:a:b",
            {},
            "Multiple ':' separators for option in jax_pjrt_client_create_options: 'allocator:a:b'. "
            "Should be in format 'key:value'",
        ),
        (
            "allocator:bfc;",
            {},
            "Multiple ':' separators for option in jax_pjrt_client_create_options: ''. Should be in format 'key:value'",
        ),
    ],
)
def test_the_option_is_parsed_as_xla_bridge_parses_it(raw, options, error):
    parsed = parse(raw)
    assert (parsed.options, parsed.error) == (options, error)


@pytest.mark.parametrize("raw", [None, "", "allocator:bfc", "allocator:a:b", {"allocator": "bfc"}, 5])
def test_the_option_is_kept_as_it_was_given(raw):
    assert parse(raw).raw == raw


def test_only_the_allocator_settings_are_overrides():
    parsed = parse({"allocator": "cuda_async", "memory_fraction": 0.5, "preallocate": False, "node_id": 0})
    assert parsed.overrides() == {"allocator": "cuda_async", "fraction": 0.5, "preallocate": False}


# --- the problems, word for word -----------------------------------------------------------------

CUDA_ALLOCATORS = ["platform", "bfc", "cuda_async"]  # generate_pjrt_gpu_plugin_options, JAX 0.10.2


def test_a_string_jax_cannot_parse_is_the_one_problem_with_jaxs_own_error():
    assert parse("allocator:a:b").problems(CUDA_ALLOCATORS) == [
        "JAX's CUDA backend will fail to start, at JAX's first operation: Multiple ':' separators for option "
        "in jax_pjrt_client_create_options: 'allocator:a:b'. Should be in format 'key:value' "
        "(jax.config's jax_pjrt_client_create_options = 'allocator:a:b')."
    ]


def test_a_string_option_of_the_wrong_type_says_only_python_can_set_it():
    assert parse("preallocate:false").problems(CUDA_ALLOCATORS) == [
        "jax.config's jax_pjrt_client_create_options gives preallocate as str 'false', but JAX's CUDA plugin "
        "takes only a bool there, so the CUDA backend will fail to start at JAX's first operation. A string "
        "option can only name the allocator; set it from Python: "
        "jax.config.update('jax_pjrt_client_create_options', {'preallocate': ...})."
    ]


def test_a_dict_option_of_the_wrong_type_says_how_to_set_it():
    assert parse({"memory_fraction": 1}).problems(CUDA_ALLOCATORS) == [
        "jax.config's jax_pjrt_client_create_options gives memory_fraction as int 1, but JAX's CUDA plugin "
        "takes only a float there, so the CUDA backend will fail to start at JAX's first operation. Set it "
        "from Python: jax.config.update('jax_pjrt_client_create_options', {'memory_fraction': ...})."
    ]


def test_a_bool_is_no_float_for_the_fraction():
    """Python's bool is an int subclass; the plugin's kFloat check refuses it all the same."""
    (problem,) = parse({"memory_fraction": True}).problems(CUDA_ALLOCATORS)
    assert problem.startswith(
        "jax.config's jax_pjrt_client_create_options gives memory_fraction as bool True, but JAX's CUDA "
        "plugin takes only a float there"
    )


def test_an_allocator_name_the_plugin_does_not_take_lists_those_it_does():
    assert parse({"allocator": "CUDA_ASYNC"}).problems(CUDA_ALLOCATORS) == [
        "jax.config's jax_pjrt_client_create_options names allocator 'CUDA_ASYNC', which JAX's CUDA plugin "
        "does not take (it compares exactly: platform, bfc, cuda_async), so the CUDA backend will fail to start."
    ]


def test_options_of_the_right_types_and_a_known_allocator_have_no_problem():
    options = parse({"allocator": "bfc", "preallocate": True, "memory_fraction": 0.5, "node_id": "x"})
    assert options.problems(CUDA_ALLOCATORS) == []


def test_without_the_list_of_allocators_no_name_is_refused():
    assert parse({"allocator": "anything"}).problems([]) == []


def test_every_entry_of_the_wrong_type_is_a_problem_in_the_order_allocator_fraction_preallocate():
    problems = parse({"preallocate": "no", "memory_fraction": "0.5", "allocator": 1}).problems(CUDA_ALLOCATORS)
    assert [p.split(" as ")[0].rsplit(" ", 1)[1] for p in problems] == ["allocator", "memory_fraction", "preallocate"]


# --- status and the allocator in effect --------------------------------------------------------


def test_status_shows_settings_from_the_create_options_over_the_environment(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    config_holds(monkeypatch, {"allocator": "cuda_async", "preallocate": False, "memory_fraction": 0.5})
    settings = _by_name(status(NO_NVML))
    assert {
        n: (s.value, s.source, s.config_option) for n, s in settings.items() if n != "remat" and n != "async_prealloc"
    } == {
        "allocator": ("cuda_async", "jax.config", "jax_pjrt_client_create_options"),
        "preallocate": (False, "jax.config", "jax_pjrt_client_create_options"),
        "fraction": (0.5, "jax.config", "jax_pjrt_client_create_options"),
    }
    assert settings["allocator"].env_var is None


def test_status_text_names_the_config_option_as_the_setting_s_home(monkeypatch):
    config_holds(monkeypatch, "allocator:cuda_async")
    line = next(li for li in str(status(NO_NVML)).splitlines() if li.strip().startswith("allocator"))
    assert line.split() == ["allocator", "cuda_async", "jax.config", "jax.config", "jax_pjrt_client_create_options"]


def test_status_warns_that_an_overridden_variable_has_no_effect(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc")
    config_holds(monkeypatch, "allocator:cuda_async")
    assert [
        w
        for w in status(NO_NVML).warnings
        if w.startswith("XLA_PYTHON_CLIENT_ALLOCATOR is set, but jax.config's jax_pjrt_client_create_options")
    ]


@pytest.mark.parametrize(
    "raw, key",
    [
        ("preallocate:false", "preallocate"),
        ("memory_fraction:0.5", "memory_fraction"),
        ({"memory_fraction": 1}, "memory_fraction"),
        ({"preallocate": 0}, "preallocate"),
    ],
)
def test_status_warns_of_a_create_option_the_cuda_plugin_refuses_for_its_type(monkeypatch, raw, key):
    config_holds(monkeypatch, raw)
    said = [w for w in status(NO_NVML).warnings if f"gives {key} as" in w]
    assert len(said) == 1 and "CUDA backend will fail to start" in said[0]


def test_status_warns_of_a_create_option_string_jax_cannot_parse(monkeypatch):
    config_holds(monkeypatch, "allocator:cuda_async:x")
    assert [w for w in status(NO_NVML).warnings if "Multiple ':' separators" in w]


def test_status_warns_of_an_allocator_name_the_plugin_does_not_take(monkeypatch):
    config_holds(monkeypatch, "allocator:CUDA_ASYNC")  # the plugin compares exactly; the env var is lower-cased
    assert [w for w in status(NO_NVML).warnings if "names allocator 'CUDA_ASYNC'" in w]


def test_the_allocator_in_effect_follows_the_create_options(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc")
    config_holds(monkeypatch, {"allocator": "cuda_async"})
    assert allocator_shim.allocator_in_effect() == "cuda_async"


def test_cuda_async_notes_read_the_create_options(monkeypatch):
    config_holds(monkeypatch, {"allocator": "cuda_async", "preallocate": False, "memory_fraction": 0.4})
    assert [w for w in status(NO_NVML).warnings if "fraction (0.4) is no cap" in w]


# --- validation --------------------------------------------------------------------------------


def test_a_setting_the_create_options_override_is_refused_and_says_where_to_change_it(monkeypatch):
    config_holds(monkeypatch, {"allocator": "cuda_async"})
    with pytest.raises(SettingsError, match="jax_pjrt_client_create_options sets allocator='cuda_async'") as err:
        validate(AllocatorSettings(allocator="bfc", preallocate=False))
    assert "would not take effect" in str(err.value) and "jax.config.update(" in str(err.value)


def test_a_setting_the_create_options_do_not_name_is_still_written(monkeypatch):
    config_holds(monkeypatch, {"allocator": "cuda_async"})
    assert validate(AllocatorSettings(preallocate=False)).env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_after_start_the_refusal_names_the_config_option_as_in_effect(monkeypatch):
    config_holds(monkeypatch, {"allocator": "cuda_async"})
    monkeypatch.setattr(allocator_shim, "backend_started", lambda: True)
    with pytest.raises(
        BackendStartedError, match=r"allocator is cuda_async \(jax.config jax_pjrt_client_create_options\)"
    ):
        validate(AllocatorSettings(allocator="bfc"))


# --- read from the installed JAX, without importing it -----------------------------------------


def test_the_installed_jax_is_asked_from_its_source(tmp_path, monkeypatch):
    """Deciding by the installed JAX, not by a version list: JAX 0.10.2 and 0.11.0 both apply
    the option in xla_bridge.py; a JAX whose xla_bridge.py does not name it is not asked."""
    jax_backend.jax_has_create_options.cache_clear()
    try:
        assert jax_backend.jax_has_create_options() is True  # the JAX installed here (0.10.2)
        fake = tmp_path / "jax"
        (fake / "_src").mkdir(parents=True)
        (fake / "__init__.py").write_text("")
        (fake / "_src" / "xla_bridge.py").write_text("def make_pjrt_c_api_client(plugin_name, options=None): ...\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "jax", raising=False)
        jax_backend.jax_has_create_options.cache_clear()
        assert jax_backend.jax_has_create_options() is False
        assert jax_backend.pjrt_create_options({"JAX_PJRT_CLIENT_CREATE_OPTIONS": "allocator:cuda_async"}) is None
    finally:
        jax_backend.jax_has_create_options.cache_clear()


_CHILD = """
import json, os, sys
{before}
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.core.readings import NotAvailable
from jupyter_gpumem.settings.status import status
report = status(NotAvailable("no_library", "synthetic"))
print("RESULT=" + json.dumps({{
    "allocator": [(s.value, s.source) for s in report.settings if s.name == "allocator"][0],
    "in_effect": allocator_shim.allocator_in_effect(),
    "jax_imported": "jax" in sys.modules,
}}))
"""


def _child(before: str, env: dict[str, str]) -> dict:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_", "JAX_"))}
    child_env.update(env, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(before=before)], capture_output=True, text=True, env=child_env, timeout=120
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, proc.stderr
    return json.loads(lines[-1][len("RESULT=") :])


def test_before_jax_is_imported_the_variable_jax_will_read_is_used_without_importing_jax():
    r = _child("", {"JAX_PJRT_CLIENT_CREATE_OPTIONS": "allocator:cuda_async", "XLA_PYTHON_CLIENT_ALLOCATOR": "bfc"})
    assert r == {"allocator": ["cuda_async", "jax.config"], "in_effect": "cuda_async", "jax_imported": False}


def create_options_value() -> str:
    """The options as the installed JAX takes them in ``jax.config.update``: a dict from 0.6
    (``string_or_object_state``, jax/_src/config.py 0.6.2 line 948), only a "k1:v1;k2:v2" string
    before (``optional_string_state``, 0.5.3 line 940, 0.4.38 line 900)."""
    import importlib.metadata

    release = tuple(int(p) for p in importlib.metadata.version("jax").split(".")[:2])
    if release >= (0, 6):
        return "{'allocator': 'cuda_async', 'preallocate': False}"
    return "'allocator:cuda_async;preallocate:false'"


def test_once_jax_is_imported_jax_config_is_read():
    before = f"import jax\njax.config.update('jax_pjrt_client_create_options', {create_options_value()})"
    r = _child(before, {"JAX_PJRT_CLIENT_CREATE_OPTIONS": "allocator:platform"})  # read at import, then replaced
    assert r == {"allocator": ["cuda_async", "jax.config"], "in_effect": "cuda_async", "jax_imported": True}
