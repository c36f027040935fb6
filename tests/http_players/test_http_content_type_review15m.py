"""A POST /train of another Content-Type is told both forms the endpoint takes."""

from __future__ import annotations

import pytest

from renderd.transport.http import TrainPost
from renderd.transport.multipart import MultipartError


def test_a_wrong_content_type_names_both_accepted_forms():
    with pytest.raises(MultipartError) as info:
        TrainPost(bytearray(b"metadata=%7B%7D"), "text/plain")
    assert str(info.value) == ("Content-Type is 'text/plain', expected multipart/form-data (or "
                               "application/x-www-form-urlencoded, as a step without images posts)")
    with pytest.raises(MultipartError, match=r"^Content-Type multipart/form-data has no boundary parameter$"):
        TrainPost(bytearray(b"x"), "multipart/form-data")
