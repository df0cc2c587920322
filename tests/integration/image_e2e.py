#!/usr/bin/env python3
"""The images of tests/integration/image-e2e.sh, made from files:

  image_e2e.py OUT

writes OUT/oci (an OCI image layout) with the tags
  main      three layers: gzip, zstd, uncompressed (see layer1..layer3)
  multi     an index: linux/amd64 and linux/arm64 manifests, one gzip layer each
  dotdot    a layer with ../escape
  symout    a symlink to /etc then a file through it (lands inside the image)
  symnone   a symlink to a directory the image lacks, then a file through it
  linkout   a hardlink to ../../../etc/passwd
  devwrap   a character device 1:1048577 (past ext4's 20-bit minors)
  bomb      one zstd layer: a 10 GiB file of zeros (a few hundred KiB)
and, for the tags whose layers a registry push would recompress (zstd,
uncompressed), OUT/dir-TAG: the same image as a skopeo dir: directory
(manifest.json and blobs by hex) for registry_aux.py pushdir. Prints
"TAG DIGEST" per manifest (and amd64/arm64 for the index's two).
"""
import gzip, hashlib, io, json, os, struct, subprocess, sys, tarfile

OCI_MAN = "application/vnd.oci.image.manifest.v1+json"
OCI_IDX = "application/vnd.oci.image.index.v1+json"
OCI_CFG = "application/vnd.oci.image.config.v1+json"
LAYER_MT = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
            "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
            "none": "application/vnd.oci.image.layer.v1.tar"}
GIB = 1 << 30
# security.capability: VFS_CAP_REVISION_2 | effective, permitted CAP_NET_RAW (13).
CAP_NET_RAW = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
LONG_DIR = "deep/" + "d" * 90 + "/" + "e" * 90
LONG_NAME = "n" * 200
UNICODE = "données/ファイル-ü.txt"
# 3 MiB of reproducible bytes that do not compress (several extents' worth).
BIG = b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(3 << 15))


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


class Tar:
    """A tar stream in memory, entries added one by one (PAX format)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.t = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)

    def add(self, name, kind=tarfile.REGTYPE, data=b"", mode=0o644, uid=0, gid=0, link="", dev=(0, 0), pax=None):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid, ti.linkname = kind, mode, uid, gid, link
        ti.devmajor, ti.devminor = dev
        ti.mtime = 1700000000
        if pax:
            ti.pax_headers = pax
        ti.size = len(data) if kind == tarfile.REGTYPE else 0
        self.t.addfile(ti, io.BytesIO(data) if ti.size else None)

    def dir(self, name, mode=0o755, uid=0, gid=0):
        self.add(name, tarfile.DIRTYPE, mode=mode, uid=uid, gid=gid)

    def sparse(self, name, realsize, chunks):
        """GNU sparse 1.0 (PAX): a map block, then the data of each chunk."""
        m = "%d\n" % len(chunks) + "".join("%d\n%d\n" % (off, len(d)) for off, d in chunks)
        m = m.encode().ljust((len(m) + 511) // 512 * 512, b"\0")
        data = m + b"".join(d for _, d in chunks)
        pax = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
               "GNU.sparse.realsize": str(realsize)}
        self.add(os.path.dirname(name) + "/GNUSparseFile.0/" + os.path.basename(name), data=data, pax=pax)

    def bytes(self):
        self.t.close()
        return self.buf.getvalue()


def layer1():
    t = Tar()
    for d in ["etc", "usr", "usr/bin", "usr/lib64", "bin", "dev", "run", "old", "old/sub", "opq", "opq/sub",
              "wh", "whdir", "whdir/inner", "deep", "deep/" + "d" * 90, LONG_DIR, "données"]:
        t.dir(d)
    t.dir("tmp", mode=0o1777)
    t.dir("home/u", mode=0o750, uid=1000, gid=1000)
    t.add("etc/motd", data=b"whited out by layer 2\n")
    t.add("etc/hostname", data=b"layer1\n")
    t.add("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n")
    t.add("usr/bin/su", data=b"su", mode=0o4755)
    t.add("usr/bin/wall", data=b"wall", mode=0o2755, gid=5)
    t.add("usr/bin/ping", data=b"ping", mode=0o755,
          pax={"SCHILY.xattr.security.capability": CAP_NET_RAW.decode("utf-8", "surrogateescape"),
               "SCHILY.xattr.user.moat": "e2e-value"})
    t.add("home/u/file", data=b"mine", mode=0o640, uid=1000, gid=1000)
    t.add("home/u/high", data=b"high ids", uid=165536, gid=165537)
    t.dir("secret", mode=0o700, uid=1000, gid=1000)
    t.add("secret/none", data=b"no permissions", mode=0o000, uid=1000, gid=1000)
    t.add("empty")
    t.add("big.bin", data=BIG)
    t.add("dev/null", tarfile.CHRTYPE, mode=0o666, dev=(1, 3))
    t.add("dev/sda1", tarfile.BLKTYPE, mode=0o660, gid=6, dev=(8, 1))
    t.add("dev/big", tarfile.CHRTYPE, mode=0o600, dev=(511, 1048575))
    t.add("run/fifo", tarfile.FIFOTYPE, mode=0o620, uid=7, gid=8)
    t.add("bin/busybox", data=b"busybox\n", mode=0o755)
    t.add("bin/ls", tarfile.LNKTYPE, link="bin/busybox")
    t.add("bin/cat", tarfile.LNKTYPE, link="bin/busybox")
    t.add("usr/lib64/target", data=b"end of the chain\n")
    t.add("usr/lib", tarfile.SYMTYPE, link="lib64", mode=0o777)
    t.add("lib", tarfile.SYMTYPE, link="usr/lib", mode=0o777)
    t.add("chain", tarfile.SYMTYPE, link="/lib/target", mode=0o777)
    t.add("longlink", tarfile.SYMTYPE, link="/" + LONG_DIR + "/" + LONG_NAME, mode=0o777)
    t.add(LONG_DIR + "/" + LONG_NAME, data=b"long\n")
    t.add(UNICODE, data="non-ASCII ✓\n".encode(), uid=1000)
    t.add("old/sub/file", data=b"old\n")
    t.add("opq/a", data=b"a\n")
    t.add("opq/sub/b", data=b"b\n")
    t.add("wh/x", data=b"x\n")
    t.add("wh/y", data=b"y\n")
    t.add("whdir/inner/f", data=b"f\n")
    t.add("swap", data=b"a file in layer 1, a directory in layer 2\n")
    t.add("hl/orig", data=b"v1\n")
    t.add("opq2/old", data=b"old\n")
    t.add("meta/kept", data=b"kept\n")
    t.sparse("sparse1g", GIB, [(512 << 20, b"M" * 4096), (GIB - 4096, b"E" * 4096)])
    return t.bytes()


def layer2():
    t = Tar()
    t.add("etc/.wh.motd")
    t.add("etc/hostname", data=b"layer2\n", mode=0o600)
    t.add("opq/.wh..wh..opq")
    t.add("opq/new", data=b"new\n")
    t.add("wh/.wh.x")
    t.add(".wh.whdir")
    t.dir("swap")
    t.add("swap/inner", data=b"inner\n")
    t.add("bin/sh", tarfile.LNKTYPE, link="bin/busybox")
    t.add("hl/link", tarfile.LNKTYPE, link="hl/orig")
    # The opaque marker after a file of its own layer: it hides the lower
    # layers only, whatever the order in the tar.
    t.add("opq2/new2", data=b"new2\n")
    t.add("opq2/.wh..wh..opq")
    t.dir("meta", mode=0o711, uid=5, gid=6)
    return t.bytes()


def layer3():
    t = Tar()
    t.add("bin/.wh.cat")
    t.add("usr/bin/late", data=b"late\n", mode=0o700, uid=65534, gid=65534)
    t.add("layer3", data=b"3\n")
    t.add("hl/orig", data=b"v2\n")
    return t.bytes()


def compress(raw, comp):
    if comp == "gzip":
        return gzip.compress(raw, 6, mtime=0)
    if comp == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    return raw


def zstd_bomb(header, zeros):
    """A zstd frame: the tar header as a raw block, then RLE blocks of zeros
    (128 KiB each, 4 bytes each): no need to compress 10 GiB."""
    out = bytearray(b"\x28\xb5\x2f\xfd" + bytes([0x00, 7 << 3]))   # no content size; window 2^17
    bh = lambda last, typ, size: (last | typ << 1 | size << 3).to_bytes(3, "little")
    out += bh(0, 0, len(header)) + header
    blk = 128 << 10
    while zeros > 0:
        n = min(blk, zeros)
        zeros -= n
        out += bh(1 if zeros == 0 else 0, 1, n) + b"\0"
    return bytes(out)


class Layout:
    def __init__(self, root):
        self.root = root
        os.makedirs(os.path.join(root, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(root, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        self.index = {"schemaVersion": 2, "mediaType": OCI_IDX, "manifests": []}

    def put(self, b):
        d = sha(b)
        with open(os.path.join(self.root, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(b)
        return d

    def image(self, layers, arch="amd64"):
        """layers: [(blob, comp, diff_id)]; returns (manifest bytes, digest)."""
        cfg = json.dumps({"architecture": arch, "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                          "rootfs": {"type": "layers", "diff_ids": [d for _, _, d in layers]}}).encode()
        man = json.dumps({"schemaVersion": 2, "mediaType": OCI_MAN,
                          "config": {"mediaType": OCI_CFG, "digest": self.put(cfg), "size": len(cfg)},
                          "layers": [{"mediaType": LAYER_MT[c], "digest": self.put(b), "size": len(b)}
                                     for b, c, _ in layers]}).encode()
        return man, self.put(man)

    def tag(self, tag, blob, digest, mt=OCI_MAN):
        self.index["manifests"].append({"mediaType": mt, "digest": digest, "size": len(blob),
                                        "annotations": {"org.opencontainers.image.ref.name": tag}})

    def as_dir(self, out, man):
        """The image of manifest bytes man as a skopeo dir: directory."""
        os.makedirs(out, exist_ok=True)
        m = json.loads(man)
        with open(os.path.join(out, "manifest.json"), "wb") as f:
            f.write(man)
        for d in [m["config"]] + m["layers"]:
            os.link(os.path.join(self.root, "blobs", "sha256", d["digest"][7:]), os.path.join(out, d["digest"][7:]))

    def close(self):
        with open(os.path.join(self.root, "index.json"), "w") as f:
            json.dump(self.index, f)


def one_layer(L, tag, entries, comp="gzip", arch="amd64"):
    t = Tar()
    for e in entries:
        t.add(e[0], e[1], **e[2])
    raw = t.bytes()
    man, d = L.image([(compress(raw, comp), comp, sha(raw))], arch)
    if tag:
        L.tag(tag, man, d)
    return man, d


def main(out):
    L = Layout(os.path.join(out, "oci"))
    raws = [layer1(), layer2(), layer3()]
    comps = ["gzip", "zstd", "none"]
    man, d = L.image([(compress(r, c), c, sha(r)) for r, c in zip(raws, comps)])
    L.tag("main", man, d)
    L.as_dir(os.path.join(out, "dir-main"), man)
    print("main", d)
    print("big.bin", hashlib.sha256(BIG).hexdigest())
    # The index: amd64 and arm64, each a marker file of its own.
    ms = [one_layer(L, None, [("arch-" + a, tarfile.REGTYPE, {"data": a.encode()})], arch=a)
          for a in ("amd64", "arm64")]
    idx = json.dumps({"schemaVersion": 2, "mediaType": OCI_IDX, "manifests": [
        {"mediaType": OCI_MAN, "digest": d, "size": len(m), "platform": {"os": "linux", "architecture": a}}
        for (m, d), a in zip(ms, ("amd64", "arm64"))]}).encode()
    L.tag("multi", idx, L.put(idx), OCI_IDX)
    print("amd64", ms[0][1])
    print("arm64", ms[1][1])
    f = tarfile.REGTYPE
    print("dotdot", one_layer(L, "dotdot", [("ok", f, {"data": b"ok"}), ("../escape", f, {"data": b"out"})])[1])
    print("symout", one_layer(L, "symout", [("etc", tarfile.DIRTYPE, {}),
                                            ("evil", tarfile.SYMTYPE, {"link": "/etc", "mode": 0o777}),
                                            ("evil/moat-e2e-owned", f, {"data": b"owned?"})])[1])
    print("symnone", one_layer(L, "symnone", [("out", tarfile.SYMTYPE, {"link": "../../../../tmp/moat-e2e-out"}),
                                              ("out/escaped", f, {"data": b"out"})])[1])
    # 1:1048577: ext4's new encoding holds 12-bit majors and 20-bit minors;
    # wrapped, this minor is 1 (1:1 is /dev/mem).
    print("devwrap", one_layer(L, "devwrap", [("dev", tarfile.DIRTYPE, {}),
                                              ("dev/wrap", tarfile.CHRTYPE, {"dev": (1, 1048577)})])[1])
    print("linkout", one_layer(L, "linkout", [("h", tarfile.LNKTYPE, {"link": "../../../etc/passwd"})])[1])
    hdr = tarfile.TarInfo("zeros")
    hdr.size, hdr.mode, hdr.mtime = 10 * GIB, 0o644, 1700000000
    header = hdr.tobuf(tarfile.PAX_FORMAT)
    bomb = zstd_bomb(header, 10 * GIB + 1024)
    # The diff_id is not the stream's (10 GiB to hash): nothing gets that far.
    man, d = L.image([(bomb, "zstd", sha(header))])
    L.tag("bomb", man, d)
    L.as_dir(os.path.join(out, "dir-bomb"), man)
    print("bomb", d)
    L.close()


if __name__ == "__main__":
    main(sys.argv[1])
