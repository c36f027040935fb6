"""A Content-Length with leading zeros (RFC 9110 8.6) is its number for the application too: the server reads the
body by it, and the WSGI environ's CONTENT_LENGTH says that number, not the header's digits (over 4,300 of them,
int() refuses them, and POST /train answered 411 "needs a Content-Length header" to a request that had one)."""

from __future__ import annotations

from tests.helpers.http_util import connect

#: More digits than Python's int() reads (sys.get_int_max_str_digits(): 4,300), well within the head's 16 KiB.
ZEROS = b"0" * 5000


def test_a_train_post_whose_content_length_has_thousands_of_leading_zeros_is_read_by_its_number(served):
    client = connect(served)
    try:
        body = b"hello"  # (no multipart form: refused for that, with the length read right)
        client.send(b"POST /train HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: "
                    + ZEROS + b"5\r\n\r\n" + body)
        response = client.response()
        assert response.status == 400, response
        assert "malformed multipart/form-data" in response.json()["error"]["message"], response
    finally:
        client.close()
