#!/usr/bin/env python3
"""The loopback helpers of tests/integration/registry.sh (127.0.0.1 only):

  token PORT CERT KEY ISSUER SERVICE USER:PASS LOG ANON
      a Docker token service: JWTs (RS256, x5c = CERT) for distribution's
      token auth; Basic USER:PASS gets what it asks, anonymous (ANON=1)
      only pull, a wrong password 401. One line per request in LOG.
  proxy PORT UPSTREAM MODEFILE LOG [REDIRECT]
      a fault proxy in front of a registry; MODEFILE (read per request)
      holds: pass | 429:N (the first N requests 429, Retry-After: 1) |
      truncate-once | truncate (blob GETs cut in half) | corrupt (one
      byte of each blob flipped) | extend (4 KiB more than each blob) |
      redirect (blob GETs 307 to REDIRECT) | slow (blobs trickled) |
      schema1 (manifests sent as Docker schema 1) | bigmanifest (5 MiB
      of spaces after each manifest) | bigchallenge (401 with a 9 KB
      WWW-Authenticate). LOG: "METHOD PATH RANGE" per request.
  blobsrv PORT UPSTREAM USER:PASS LOG
      the second server of a redirect: logs each request's path and its
      Authorization header (or -), serves the blob from UPSTREAM with its
      own credentials.
  index LAYOUT SRC DST
      in OCI layout LAYOUT, tag DST = an index of SRC's manifest
      (linux/amd64) and a copy for linux/arm64 (its own config); prints
      the two manifest digests.
  pushdir REGISTRY NAME:TAG DIR
      push a skopeo dir: directory as it is (uncompressed or zstd layers)
      through the registry API (plain HTTP, no auth); prints the
      manifest digest.
"""
import base64, hashlib, http.client, http.server, json, os, socketserver, sys
import threading, time, urllib.parse

LOCK = threading.Lock()


def log(path, line):
    with LOCK, open(path, "a") as f:
        f.write(line + "\n")


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def head(self, status, headers, body):
        """Status and headers (Content-Length: the body's) of an answer."""
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()


# ---- token service ----

def token_main(port, cert, key, issuer, service, userpass, logf, anon):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    der = x509.load_pem_x509_certificate(open(cert, "rb").read()).public_bytes(serialization.Encoding.DER)
    pkey = serialization.load_pem_private_key(open(key, "rb").read(), None)
    want = "Basic " + base64.b64encode(userpass.encode()).decode()

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            auth = self.headers.get("Authorization")
            log(logf, "token %s auth=%s" % (",".join(q.get("scope", [])), "basic" if auth else "-"))
            if auth and auth != want or not auth and anon != "1":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            access = []
            for sc in q.get("scope", []):
                t, name, actions = sc.split(":")
                acts = [a for a in actions.split(",") if auth or a == "pull"]
                access.append({"type": t, "name": name, "actions": acts})
            now = int(time.time())
            hdr = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
            claims = {"iss": issuer, "sub": "moat" if auth else "", "aud": service, "exp": now + 600,
                      "nbf": now - 60, "iat": now, "jti": str(time.time_ns()), "access": access}
            signing = b64url(json.dumps(hdr).encode()) + "." + b64url(json.dumps(claims).encode())
            sig = pkey.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
            tok = signing + "." + b64url(sig)
            body = json.dumps({"token": tok, "access_token": tok, "expires_in": 600}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    Server(("127.0.0.1", int(port)), H).serve_forever()


# ---- fault proxy ----

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def upstream_get(upstream, method, path, headers):
    c = http.client.HTTPConnection(upstream, timeout=60)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, [(k, v) for k, v in r.getheaders() if k.lower() not in HOP], body


def proxy_main(port, upstream, modefile, logf, redirect=None):
    state = {"429": 0, "cut": set()}

    class H(Quiet):
        def answer(self, status, headers, body, cut=False, slow=False):
            self.head(status, headers, body)
            if self.command == "HEAD":
                return
            if cut:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            step = 16384 if slow else len(body) or 1
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                if slow:
                    self.wfile.flush()
                    time.sleep(0.02)

        def handle_any(self):
            try:
                mode = open(modefile).read().strip()
            except OSError:
                mode = "pass"
            blob = "/blobs/sha256:" in self.path and self.command == "GET"
            log(logf, "%s %s %s" % (self.command, self.path, self.headers.get("Range", "-")))
            if mode.startswith("429:"):
                with LOCK:
                    hit = state["429"] < int(mode[4:])
                    state["429"] += hit
                if hit:
                    self.answer(429, [("Retry-After", "1")], b'{"errors":[{"code":"TOOMANYREQUESTS"}]}')
                    return
            if mode == "bigchallenge":
                self.answer(401, [("WWW-Authenticate", 'Bearer realm="http://127.0.0.1/%s"' % ("a" * 9000))], b"")
                return
            if blob and mode == "redirect":
                self.answer(307, [("Location", redirect + self.path)], b"")
                return
            hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            status, headers, body = upstream_get(upstream, self.command, self.path, hdrs)
            cut = False
            if "/manifests/" in self.path and status == 200 and mode == "schema1":
                headers = [(k, "application/vnd.docker.distribution.manifest.v1+prettyjws"
                            if k.lower() == "content-type" else v) for k, v in headers]
            if "/manifests/" in self.path and status == 200 and mode == "bigmanifest":
                body = body + b" " * (5 << 20)
            if blob and status in (200, 206) and mode == "extend":
                body = body + b"\0" * 4096
            if blob and status in (200, 206):
                if mode == "corrupt" and body:
                    body = body[:len(body) // 2] + bytes([body[len(body) // 2] ^ 0xff]) + body[len(body) // 2 + 1:]
                d = self.path.rsplit("/", 1)[1]
                with LOCK:
                    cut = mode == "truncate" or (mode == "truncate-once" and d not in state["cut"])
                    if mode == "truncate-once":
                        state["cut"].add(d)
            self.answer(status, headers, body, cut=cut, slow=blob and mode == "slow")

        do_GET = do_HEAD = handle_any

    Server(("127.0.0.1", int(port)), H).serve_forever()


def blobsrv_main(port, upstream, userpass, logf):
    basic = "Basic " + base64.b64encode(userpass.encode()).decode()

    class H(Quiet):
        def do_GET(self):
            log(logf, "%s auth=%s" % (self.path, self.headers.get("Authorization", "-")))
            hdrs = {"Authorization": basic}
            if self.headers.get("Range"):
                hdrs["Range"] = self.headers["Range"]
            status, headers, body = upstream_get(upstream, "GET", self.path, hdrs)
            self.head(status, headers, body)
            self.wfile.write(body)

    Server(("127.0.0.1", int(port)), H).serve_forever()


# ---- images ----

def put_blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d


def index_main(layout, src, dst):
    idx = json.load(open(os.path.join(layout, "index.json")))
    ent = [m for m in idx["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == src][0]
    blob = lambda d: open(os.path.join(layout, "blobs", "sha256", d[7:]), "rb").read()
    man = json.loads(blob(ent["digest"]))
    cfg = json.loads(blob(man["config"]["digest"]))
    cfg["architecture"] = "arm64"
    cfg_arm = json.dumps(cfg).encode()
    man_arm = dict(man, config=dict(man["config"], digest=put_blob(layout, cfg_arm), size=len(cfg_arm)))
    man_arm_b = json.dumps(man_arm).encode()
    d_arm = put_blob(layout, man_arm_b)
    mt = "application/vnd.oci.image.manifest.v1+json"
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": mt, "digest": ent["digest"], "size": ent["size"],
         "platform": {"os": "linux", "architecture": "amd64"}},
        {"mediaType": mt, "digest": d_arm, "size": len(man_arm_b),
         "platform": {"os": "linux", "architecture": "arm64"}}]}
    ib = json.dumps(index).encode()
    idx["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": put_blob(layout, ib),
                             "size": len(ib), "annotations": {"org.opencontainers.image.ref.name": dst}})
    json.dump(idx, open(os.path.join(layout, "index.json"), "w"))
    print(ent["digest"], d_arm)


def push_blob(reg, name, data):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    c = http.client.HTTPConnection(reg)
    c.request("POST", "/v2/%s/blobs/uploads/" % name, body=b"")
    r = c.getresponse(); r.read()
    loc = r.getheader("Location")
    loc = urllib.parse.urlparse(loc)
    path = loc.path + "?" + (loc.query + "&" if loc.query else "") + "digest=" + d
    c.request("PUT", path, body=data, headers={"Content-Type": "application/octet-stream"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
    return d


def pushdir_main(reg, nametag, src):
    """Push a skopeo dir: directory as it is (skopeo would recompress
    uncompressed and zstd layers to gzip on the way to a registry)."""
    name, tag = nametag.rsplit(":", 1)
    man = open(os.path.join(src, "manifest.json"), "rb").read()
    m = json.loads(man)
    for d in [m["config"]] + m["layers"]:
        push_blob(reg, name, open(os.path.join(src, d["digest"][7:]), "rb").read())
    c = http.client.HTTPConnection(reg)
    c.request("PUT", "/v2/%s/manifests/%s" % (name, tag), body=man, headers={"Content-Type": m["mediaType"]
              if "mediaType" in m else "application/vnd.oci.image.manifest.v1+json"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
    print("sha256:" + hashlib.sha256(man).hexdigest())


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"token": token_main, "proxy": proxy_main, "blobsrv": blobsrv_main, "index": index_main,
     "pushdir": pushdir_main}[cmd](*args)
