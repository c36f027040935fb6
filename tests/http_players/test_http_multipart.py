"""The in-place multipart splitter: Unity's layout, the RFC's corners, malformed bodies, and fuzzing.

The fuzz tests build bodies with an encoder written here (not the one under test), check the splitter
recovers every part exactly, agrees with the ``multipart`` package on what both accept, and raises
nothing but MultipartError on any mutation of a valid body.
"""

from __future__ import annotations

import time
import urllib.parse

import multipart as mp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from renderd.transport.multipart import (
    MAX_BOUNDARY_LENGTH,
    MultipartError,
    boundary_from_content_type,
    form_decode,
    parse_header_params,
    split_multipart,
    split_urlencoded,
)

B = b"xYz0123456789abcdefghijklmnopqrstuvwxyzAB"


def encode(parts, boundary=B, *, preamble=b"", epilogue=b"", padding=b"", unity=True):
    out = [preamble + (b"\r\n" if preamble else b"")]
    for name, filename, body in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        if unity:
            headers = b"Content-Type: application/octet-stream\r\nContent-disposition: " + disp.encode() + b"\r\n"
        else:
            headers = b"Content-Disposition: " + disp.encode() + b"\r\n"
        out.append(b"--" + boundary + padding + b"\r\n" + headers + b"\r\n" + body + b"\r\n")
    out.append(b"--" + boundary + b"--" + epilogue)
    return bytearray(b"".join(out))


def bodies(body, parts):
    return [(p.name, p.filename, bytes(body[p.start : p.end])) for p in parts]


# -- the happy paths ----------------------------------------------------------------------------------------


def test_unity_layout_parts_in_order_with_offsets():
    parts = [("image", "file.dat", b"\x00\r\n--x" * 10), ("metadata", None, b'{"agents": []}'), ("token", None, b"t")]
    body = encode(parts)
    got = split_multipart(body, B)
    assert bodies(body, got) == parts
    assert got[0].content_type == "application/octet-stream"
    assert got[0].size == len(parts[0][2])


def test_preamble_epilogue_padding_and_plain_headers():
    parts = [("a", None, b"1"), ("b", "f", b"")]
    body = encode(parts, preamble=b"ignore me", epilogue=b"\r\nand me too", padding=b" \t", unity=False)
    assert bodies(body, split_multipart(body, B)) == parts
    body = encode(parts, padding=b" \t" * 512)  # exactly the most padding accepted
    assert bodies(body, split_multipart(body, B)) == parts


def test_part_without_headers_is_refused_for_lack_of_a_name():
    body = bytearray(b"--" + B + b"\r\n\r\nbody\r\n--" + B + b"--")
    with pytest.raises(MultipartError, match="no Content-Disposition"):
        split_multipart(body, B)


def test_bytes_input_works_too():
    body = bytes(encode([("a", None, b"xyz")]))
    assert bodies(body, split_multipart(body, B)) == [("a", None, b"xyz")]


@pytest.mark.parametrize(
    "value, boundary",
    [
        ('multipart/form-data; boundary="abc"', b"abc"),
        ("multipart/form-data; boundary=abc", b"abc"),
        ("Multipart/Form-Data;boundary=abc ; charset=utf-8", b"abc"),
        ('multipart/form-data; charset="a;b"; boundary="q\\"x"', b'q"x'),
    ],
)
def test_boundary_from_content_type(value, boundary):
    assert boundary_from_content_type(value) == boundary


@pytest.mark.parametrize(
    "value, match",
    [
        (None, "no Content-Type"),
        ("", "no Content-Type"),
        ("application/json", "expected multipart/form-data"),
        ("multipart/form-data", "no boundary"),
        ('multipart/form-data; boundary=""', "no boundary"),
        ("multipart/form-data; boundary=" + "a" * (MAX_BOUNDARY_LENGTH + 1), "over"),
        ("multipart/form-data; boundary=\u00e9t\u00e9", "not ASCII"),
    ],
)
def test_bad_content_types(value, match):
    with pytest.raises(MultipartError, match=match):
        boundary_from_content_type(value)


def test_header_params():
    assert parse_header_params('form-data; name="image"; filename="file.dat"') == (
        "form-data",
        {"name": "image", "filename": "file.dat"},
    )
    assert parse_header_params("FORM-DATA;NAME=x") == ("form-data", {"name": "x"})


# -- malformed bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, match",
    [
        (b"no boundary anywhere", "never contains the multipart boundary"),
        (b"--" + B + b"\r\nContent-Disposition: form-data; name=a\r\n\r\nbody", "never closed"),
        (b"--" + B + b"\r\nContent-Disposition: form-data; name=a\r\n", "headers never end"),
        (b"--" + B + b"junk\r\n", "must be followed by CRLF"),
        (b"--" + B, "must be followed by CRLF"),
        (b"--" + B + b"\r\nContent-Type: x\r\n\r\nb\r\n--" + B + b"--", "no Content-Disposition"),
        (b"--" + B + b"\r\nContent-Disposition: attachment; name=a\r\n\r\nb\r\n--" + B + b"--", "expected form-data"),
        (b"--" + B + b"\r\nContent-Disposition: form-data\r\n\r\nb\r\n--" + B + b"--", "has no name"),
        (b"--" + B + b"\r\nno colon here\r\n\r\nb\r\n--" + B + b"--", "malformed part header"),
        (b"--" + B + b"\r\n Folded: header\r\n\r\nb\r\n--" + B + b"--", "malformed part header"),
        (b"--" + B + b"\r\nContent-Disposition: form-data; name=a\r\n\r\nb\r\n--" + B + b"x", "must be followed"),
        (b"preamble\r\n--" + B + b"--", "holds no part"),
        (b"--" + B + b" " * 1025 + b"\r\nContent-Disposition: form-data; name=a\r\n\r\nb\r\n--" + B + b"--",
         "more than 1024 bytes of padding"),
    ],
)
def test_malformed(body, match):
    with pytest.raises(MultipartError, match=match):
        split_multipart(bytearray(body), B)


def test_limits():
    body = encode([("p", None, b"")] * 5)
    with pytest.raises(MultipartError, match="more than 4 parts"):
        split_multipart(body, B, max_parts=4)
    long = bytearray(b"--" + B + b"\r\nContent-Disposition: form-data; name=a\r\nX-Pad: " + b"p" * 200 + b"\r\n\r\nb")
    with pytest.raises(MultipartError, match="longer than 64 bytes"):
        split_multipart(long, B, max_header_size=64)
    with pytest.raises(MultipartError, match="invalid multipart boundary"):
        split_multipart(bytearray(b"x"), b"")


def test_error_names_the_offset():
    body = bytearray(b"--" + B + b"\r\nno colon\r\n\r\nb\r\n--" + B + b"--")
    with pytest.raises(MultipartError) as info:
        split_multipart(body, B)
    assert info.value.offset == len(B) + 4
    assert "byte offset" in str(info.value)


# -- fuzzing ------------------------------------------------------------------------------------------------

names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='"\\;='),
                min_size=1, max_size=12)
part_bodies = st.binary(max_size=300).filter(lambda b: B not in b)
parts_strategy = st.lists(st.tuples(names, st.one_of(st.none(), names), part_bodies), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=parts_strategy, preamble=st.binary(max_size=20).filter(lambda b: B not in b and b"--" not in b),
       padding=st.sampled_from([b"", b" ", b"\t \t"]), unity=st.booleans())
def test_fuzz_roundtrip(parts, preamble, padding, unity):
    body = encode(parts, preamble=preamble, padding=padding, unity=unity)
    assert bodies(body, split_multipart(body, B)) == parts


# The multipart package decodes HTML5's limited percent-encoding in names (%22, %0D, %0A: a browser's escapes of
# '"', CR and LF); renderd takes a name's '%' as it is (a player's field names are fixed words, and
# test_a_percent_in_a_name_is_taken_as_it_is pins it), so the names compared here have none.
plain_names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='"\\;=%'),
                      min_size=1, max_size=12)
plain_parts = st.lists(st.tuples(plain_names, st.one_of(st.none(), plain_names), part_bodies), min_size=1, max_size=6)


def test_a_percent_in_a_name_is_taken_as_it_is():
    body = bytes(encode([("%22", "a%0Db", b"x")], unity=False))
    assert bodies(body, split_multipart(body, B)) == [("%22", "a%0Db", b"x")]


@settings(max_examples=200, deadline=None)
@given(parts=plain_parts)
def test_fuzz_agrees_with_the_multipart_package(parts):
    body = bytes(encode(parts, unity=False))
    theirs = []
    parser = mp.PushMultipartParser(B, content_length=len(body))
    current = None
    chunks: list[bytes] = []
    for event in parser.parse(body):
        if isinstance(event, mp.MultipartSegment):
            current, chunks = event, []
        elif event is None:
            theirs.append((current.name, current.filename, b"".join(chunks)))
        else:
            chunks.append(bytes(event))
    for _ in parser.parse(b""):
        pass
    assert bodies(body, split_multipart(body, B)) == theirs


@settings(max_examples=250, deadline=None)
@given(parts=parts_strategy, data=st.data())
def test_fuzz_mutations_raise_only_multipart_error(parts, data):
    body = encode(parts)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(body) - 1)))
        if op == "flip" and body:
            body[pos] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del body[pos : pos + data.draw(st.integers(1, 50))]
        else:
            body[pos:pos] = data.draw(st.sampled_from([b"\r\n", b"--", b"--" + B, b"\r\n\r\n", b'"', b";"]))
    try:
        got = split_multipart(body, B)
    except MultipartError:
        return
    for p in got:
        assert 0 <= p.start <= p.end <= len(body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(raw):
    try:
        split_multipart(bytearray(raw), B)
    except MultipartError:
        pass


@settings(max_examples=200, deadline=None)
@given(parts=parts_strategy, hints=st.lists(st.integers(0, 400), max_size=8), exact=st.booleans())
# a hint that skips the next delimiter and lands on a later one (found by this test)
@example(parts=[("0", None, b"\x00" * 14), ("0000000000", "00", b"\x00" * 3)], hints=[172], exact=False)
def test_fuzz_size_hints_never_change_a_valid_split(parts, hints, exact):
    body = encode(parts)
    if exact:
        hints = [len(b) for _, _, b in parts]
    assert split_multipart(body, B, size_hints=hints) == split_multipart(body, B)


def test_header_blocks_are_cached_but_errors_keep_their_offsets():
    block = b"--" + B + b"\r\nno colon\r\n\r\nb\r\n--" + B + b"--"
    for prefix in (b"", b"pre\r\n"):
        with pytest.raises(MultipartError) as info:
            split_multipart(bytearray(prefix + block), B)
        assert info.value.offset == len(prefix) + len(B) + 4


# -- application/x-www-form-urlencoded (Unity's WWWForm without images) ---------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=20), st.text(max_size=50)), max_size=8))
def test_urlencoded_fields_round_trip(fields):
    body = bytearray(urllib.parse.urlencode(fields).encode("ascii"))
    got = [(p.name, form_decode(body[p.start : p.end]).decode("utf-8")) for p in split_urlencoded(body)]
    assert got == fields


def test_urlencoded_corners():
    body = bytearray(b"&&a&b=&c=1%2B1+2&&")
    assert [(p.name, bytes(form_decode(body[p.start : p.end]))) for p in split_urlencoded(body)] == [
        ("a", b""), ("b", b""), ("c", b"1+1 2")]
    assert split_urlencoded(bytearray()) == []
    with pytest.raises(MultipartError, match="more than 2 fields"):
        split_urlencoded(bytearray(b"a=1&b=2&c=3"), max_fields=2)
    with pytest.raises(MultipartError, match="name is longer than 4 bytes"):
        split_urlencoded(bytearray(b"a=1&abcde=2"), max_name_size=4)


def test_urlencoded_runs_of_separators_cost_no_python_work_per_byte():
    # The form is split before the token is checked: a body of 8 MiB of '&' (empty fields, skipped) from a
    # peer without the token must cost a search, not a Python loop turn per byte (seconds of CPU per post).
    body = bytearray(b"&" * (8 << 20) + b"metadata=%7B%7D" + b"&" * (1 << 20) + b"token=t")
    started = time.process_time()
    parts = split_urlencoded(body)
    assert time.process_time() - started < 1.0
    assert [p.name for p in parts] == ["metadata", "token"]
