#!/usr/bin/env python3
"""Writes tests/paypal/openssl-vector.json: a PayPal signature made by openssl,
independently of hookd, over PayPal's signed string
`transmission id|transmission time|webhook id|CRC32 of the body` (the CRC32 as
an unsigned decimal). Run from the repository root; needs openssl on PATH."""
import base64, json, subprocess, zlib

body = b'{"id":"WH-9UG43882HX7271132-6E0871324L7949614","event_type":"PAYMENT.CAPTURE.COMPLETED"}'
crc = zlib.crc32(body)
transmission_id, time, webhook_id = "69cd13f0-d67a-11e5-baa3-778b53f4ae55", "2016-02-18T20:01:35Z", "1JE4291016473214C"
message = f"{transmission_id}|{time}|{webhook_id}|{crc}"
sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", "tests/paypal/key-1.pem"],
                     input=message.encode(), capture_output=True, check=True).stdout
vector = {
    "_about": "Made by scripts/vectors/make-paypal.py: openssl dgst -sha256 -sign tests/paypal/key-1.pem "
              "over the signed string (PayPal's recipe; zlib.crc32 of the body)",
    "body": body.decode(), "crc32": crc, "signed_string": message, "webhook_id": webhook_id,
    "transmission_id": transmission_id, "transmission_time": time,
    "transmission_sig": base64.b64encode(sig).decode(),
}
with open("tests/paypal/openssl-vector.json", "w") as f:
    json.dump(vector, f, indent=2)
    f.write("\n")
