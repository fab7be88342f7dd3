"""Bad input, fuzzed with hypothesis: the %gpumem grammar, the trace reader, every REST route's
query string, the /devices socket's query string, jupyter_gpumem.configure, and nonsense in a
notebook's metadata.

Every input either works or fails with the documented error type, and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jupyter_gpumem
from jupyter_gpumem.core.tracefile import Trace, TraceError, read_trace_bytes
from jupyter_gpumem.kernel.magics import Command, MagicUsageError, parse_line
from jupyter_gpumem.settings.apply import SettingsError
from jupyter_gpumem.settings.configure import configure_from_notebook
from jupyter_gpumem.testing import fake_nvml

EXT = {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}}
SETTING_NAMES = ("preallocate", "fraction", "allocator", "async_prealloc", "remat")
GRAMMAR_WORDS = [
    "preallocate",
    "prealloc",
    "fraction",
    "mem_fraction",
    "allocator",
    "async_prealloc",
    "remat",
    "on",
    "off",
    "true",
    "false",
    ".5",
    "50%",
    "0",
    "1.5",
    "-1",
    "nan",
    "inf",
    "2GiB",
    "all",
    "bfc",
    "platform",
    "cuda_async",
    "default",
    "status",
    "reset",
    "help",
    "-h",
    "--help",
    "monitor",
    "record",
    "estimate",
    "doctor",
    "'",
    '"',
    "\\",
    "%",
    "=",
    "\x00",
    "😀",
]


def _line_words():
    return st.lists(st.one_of(st.sampled_from(GRAMMAR_WORDS), st.text(max_size=12)), max_size=6).map(" ".join)


# --- the %gpumem grammar ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), _line_words()))
def test_any_gpumem_line_parses_or_raises_the_documented_error_and_sets_no_env(line):
    before = dict(os.environ)
    try:
        command = parse_line(line)
    except (MagicUsageError, SettingsError) as exc:
        assert str(exc)  # an error a person can read
    else:
        assert isinstance(command, Command)
    assert dict(os.environ) == before


# --- the trace reader -----------------------------------------------------------------------

HEADER = {"kind": "header", "format": 1, "synthetic": True, "devices": []}
SAMPLE = {"kind": "sample", "t": 1.0, "pid": 1, "devices": [], "jax": []}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _mutated_sample():
    keys = st.sampled_from(["t", "pid", "devices", "jax", "kind", "extra"])
    return st.dictionaries(keys, json_values, max_size=4).map(lambda d: {**SAMPLE, **d})


def _trace_bytes():
    good = json.dumps(HEADER) + "\n" + json.dumps(SAMPLE) + "\n"
    lines = st.lists(
        st.one_of(
            _mutated_sample().map(json.dumps),
            json_values.map(json.dumps),
            st.text(max_size=40),
            st.just('{"kind": "sample", "t": 1e999}'),
            st.just('{"kind": "sample", "t": ' + "9" * 5000 + "}"),
        ),
        max_size=6,
    ).map(lambda ls: (good + "\n".join(ls)).encode("utf-8", "surrogatepass"))
    return st.one_of(
        lines,
        st.binary(max_size=200),
        st.tuples(lines, st.integers(min_value=0, max_value=400)).map(lambda t: t[0][: t[1]]),  # truncated
    )


def _check_trace(trace):
    assert isinstance(trace, Trace)
    assert trace.error is None or isinstance(trace.error, TraceError)
    for sample in trace.samples:
        assert isinstance(sample.t, float) and math.isfinite(sample.t)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trace_bytes())
def test_any_trace_bytes_read_to_a_trace_or_a_trace_error(data):
    _check_trace(read_trace_bytes(data))
    try:
        _check_trace(read_trace_bytes(data, strict=True))
    except TraceError as exc:
        assert exc.line >= 1 and isinstance(exc.partial, Trace)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=10_000))
def test_a_cut_trace_keeps_every_complete_line_before_the_cut(cut):
    lines = [json.dumps(HEADER)] + [json.dumps({**SAMPLE, "t": float(i)}) for i in range(40)]
    data = ("\n".join(lines) + "\n").encode()
    cut = min(cut, len(data))
    trace = read_trace_bytes(data[:cut])
    complete = data[:cut].count(b"\n") - 1  # sample lines ended by a newline
    if complete >= 0:
        assert trace.error is None
        assert len(trace.samples) >= complete


# --- configure(**nonsense) -------------------------------------------------------------------

unknown_names = st.text(min_size=1, max_size=15).filter(lambda s: s.isidentifier() and s not in SETTING_NAMES)
bad_fraction = st.one_of(
    st.floats(max_value=0.0),
    st.floats(min_value=1.0, exclude_min=True),
    st.just(float("nan")),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.dictionaries(unknown_names, json_values, min_size=1, max_size=3),
        bad_fraction.map(lambda v: {"fraction": v}),
    ),
    st.dictionaries(st.sampled_from(SETTING_NAMES), json_values, max_size=3),
)
def test_configure_with_nonsense_raises_a_clear_error_and_changes_nothing(nonsense, others):
    kwargs = {**others, **nonsense}
    env = dict(os.environ)
    state = [(s.name, s.value, s.source) for s in jupyter_gpumem.status().settings]
    with pytest.raises(SettingsError) as err:
        jupyter_gpumem.configure(**kwargs)
    message = str(err.value)
    assert any(
        word in message for word in ("settings are", "(0, 1]", "takes", "valid", "expected", "refused", "started")
    )
    assert dict(os.environ) == env
    assert [(s.name, s.value, s.source) for s in jupyter_gpumem.status().settings] == state


# --- REST: random query strings on every route ----------------------------------------------


@pytest.fixture
def jp_server_config():
    return {**EXT, "GpuMem": {"poll_interval": 0.5}}


# "token" is left out: it is jupyter_server's own login parameter, and a wrong one is a 403.
query_keys = st.one_of(st.sampled_from(["notebook", "NOTEBOOK", "", "x", "notebook[]"]), st.text(max_size=10)).filter(
    lambda k: k != "token"
)
query_values = st.one_of(
    st.sampled_from(
        ["a.ipynb", "../../etc/passwd", "/etc/passwd", "a//b.ipynb", "./a.ipynb", "a\\b", "%00", "x" * 5000]
    ),
    st.text(max_size=40),
)
query_strings = st.one_of(
    st.lists(st.tuples(query_keys, query_values), max_size=4).map(
        lambda pairs: "&".join(f"{urllib.parse.quote(k, safe='')}={urllib.parse.quote(v, safe='')}" for k, v in pairs)
    ),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60)
    .map(lambda s: urllib.parse.quote(s, safe="=&%/;+"))
    .filter(lambda q: "token=" not in q),
)


async def test_random_query_strings_on_every_route_get_200_or_a_json_400(
    jp_fetch, jp_http_port, jp_base_url, jp_auth_header
):
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}jupyter-gpumem/api/"
    seen = set()

    def get(route, query):
        request = urllib.request.Request(f"{base}{route}?{query}", headers=dict(jp_auth_header))
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read()

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.sampled_from(["devices", "kernels", "config"]), query_strings)
    def fuzz(route, query):
        code, ctype, body = get(route, query)
        seen.add(code)
        assert code in (200, 400), (route, query, code, body[:300])
        assert ctype.startswith("application/json")
        if code == 400:
            assert json.loads(body)["error"]

    with fake_nvml("three_gpus"):
        # The server runs on this loop; the blocking client runs on a worker thread.
        await asyncio.get_running_loop().run_in_executor(None, fuzz)
        code, _, body = await asyncio.get_running_loop().run_in_executor(None, get, "config", "")
    assert code == 200 and json.loads(body)["version"]  # still serving
    assert seen == {200, 400}


# --- the /devices socket: random query strings ------------------------------------------------

# Long names of many-byte and control characters: a close reason is at most 123 bytes.
long_names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=20, max_size=80)
ws_query_strings = st.one_of(
    query_strings,
    st.lists(st.tuples(st.one_of(long_names, query_keys), query_values), min_size=1, max_size=3).map(
        lambda pairs: "&".join(
            f"{urllib.parse.quote(k, safe='')}={urllib.parse.quote(v, safe='')}" for k, v in pairs if k != "token"
        )
    ),
)


async def test_random_query_strings_on_the_socket_get_the_answer_or_a_1008_close(
    jp_fetch, jp_http_port, jp_base_url, jp_auth_header
):
    """Each client either gets the /devices JSON or a 1008 close with a reason of at most 123
    UTF-8 bytes and no control characters; never an abnormal close (no code)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    loop = asyncio.get_running_loop()
    url = f"ws://127.0.0.1:{jp_http_port}{jp_base_url}jupyter-gpumem/api/devices/ws"
    outcomes = {"answer": 0, "1008": 0}

    async def client(query):
        ws = await websocket_connect(HTTPRequest(f"{url}?{query}", headers=dict(jp_auth_header)))
        message = await asyncio.wait_for(ws.read_message(), 20)
        ws.close()
        return message, ws.close_code, ws.close_reason

    @settings(max_examples=300, deadline=None, database=None)
    @given(ws_query_strings)
    def fuzz(query):
        message, code, reason = asyncio.run_coroutine_threadsafe(client(query), loop).result(30)
        if message is not None:
            assert json.loads(message)["devices"], query
            outcomes["answer"] += 1
            return
        assert code == 1008, (query, code, reason)
        assert reason and len(reason.encode("utf-8")) <= 123, (query, reason)
        assert reason.isprintable(), (query, reason)
        outcomes["1008"] += 1

    with fake_nvml("three_gpus"):
        await loop.run_in_executor(None, fuzz)
    print(f"socket clients: {outcomes}")
    assert outcomes["answer"] and outcomes["1008"]


# --- notebook metadata ------------------------------------------------------------------------

NONSENSE_METADATA = {"preallocate": "sometimes", "fraction": [1, 2], "allocator": {"x": None}, "surprise": 1e308}


async def test_notebook_with_nonsense_gpumem_metadata_opens_and_its_kernel_is_listed(jp_fetch, jp_root_dir):
    """The server with the extension opens the notebook, and the extension lists the kernel of a
    session on it with its path. (The panel's reading of the same metadata, which refuses every key,
    is labextension/test/allocatorSettings.test.ts; the kernel's is the next test.)"""
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"jupyter_gpumem": NONSENSE_METADATA},
        "cells": [
            {"cell_type": "code", "id": "c1", "metadata": {}, "source": "1 + 1", "outputs": [], "execution_count": None}
        ],
    }
    (jp_root_dir / "odd.ipynb").write_text(json.dumps(notebook))
    response = await jp_fetch("api", "contents", "odd.ipynb")
    model = json.loads(response.body)
    assert response.code == 200 and model["type"] == "notebook"
    assert model["content"]["metadata"]["jupyter_gpumem"] == NONSENSE_METADATA
    session = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": "odd.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}}),
    )
    kernel_id = json.loads(session.body)["kernel"]["id"]
    kernels = json.loads((await jp_fetch("jupyter-gpumem", "api", "kernels")).body)["kernels"]
    assert [(k["kernel_id"], k["notebook_path"]) for k in kernels] == [(kernel_id, "odd.ipynb")]


def test_nonsense_notebook_settings_reaching_the_kernel_are_refused_and_change_nothing():
    before = dict(os.environ)
    with pytest.raises(SettingsError) as err:
        configure_from_notebook(**NONSENSE_METADATA)
    assert str(err.value)
    assert dict(os.environ) == before
