#!/usr/bin/env python3
"""Host side of tests/linux/qemu-net.sh: an HTTP server (and, with --dns,
a DNS responder) on 127.0.0.1 only, for the default guest to reach through
QEMU's user-mode network at 10.0.2.2.

    net-server.py [--dns]

Prints one line "HTTP_PORT CLOSED_PORT SHA256" on stdout once listening
(CLOSED_PORT: a port that was bound and closed, so nothing listens there;
SHA256: of the body every /file-like path serves), then serves until
killed. Paths (the same 200000 deterministic bytes):
    /file.bin   Content-Length
    /chunked    Transfer-Encoding: chunked, chunks of odd sizes
    /close      no length: the body ends when the connection closes
    /redirect   302 to /file.bin
    /missing    404
--dns: answers A queries on 127.0.0.1:53/udp: "files.test" is 10.0.2.2,
every other name NXDOMAIN (so nothing is ever asked of a real resolver).
"""
import hashlib
import http.server
import socket
import socketserver
import struct
import sys
import threading

BODY = b"".join(hashlib.sha256(b"moat-net-%d" % i).digest() for i in range(6250))
assert len(BODY) == 200000


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        if self.path == "/file.bin":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(BODY)
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            off, n = 0, 1
            while off < len(BODY):
                part = BODY[off:off + n]
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
                off += len(part)
                n = n * 3 + 7
            self.wfile.write(b"0\r\nX-Trailer: y\r\n\r\n")
        elif self.path == "/close":
            self.protocol_version = "HTTP/1.0"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(BODY)
            self.close_connection = True
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/file.bin")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not here\n")
        self.close_connection = True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def dns_loop(sock):
    while True:
        q, peer = sock.recvfrom(1500)
        if len(q) < 12:
            continue
        ident, flags, qd = struct.unpack(">HHH", q[:6])
        off, labels = 12, []
        while off < len(q) and q[off] != 0:
            n = q[off]
            labels.append(q[off + 1:off + 1 + n].decode("ascii", "replace").lower())
            off += 1 + n
        question = q[12:off + 5]
        name = ".".join(labels)
        if name == "files.test":
            hdr = struct.pack(">HHHHHH", ident, 0x8180, 1, 1, 0, 0)
            rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([10, 0, 2, 2])
            sock.sendto(hdr + question + rr, peer)
        else:
            hdr = struct.pack(">HHHHHH", ident, 0x8183, 1, 0, 0, 0)
            sock.sendto(hdr + question, peer)


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed = probe.getsockname()[1]
    probe.close()
    if "--dns" in sys.argv[1:]:
        d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d.bind(("127.0.0.1", 53))
        threading.Thread(target=dns_loop, args=(d,), daemon=True).start()
    print(srv.server_address[1], closed, hashlib.sha256(BODY).hexdigest(), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
