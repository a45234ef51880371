#!/usr/bin/env python3
"""Write an OCI image-layout archive (what `ctr images import` reads) holding
one single-layer image, under one or more names.

Usage: mkimage.py OUT.tar [options]
  --name REF            a full reference, e.g. registry.k8s.io/pause:3.10.1
                        (repeatable; each is one index.json entry pointing at
                        the same manifest, annotated with
                        io.containerd.image.name, what containerd's importer
                        uses first, and org.opencontainers.image.ref.name)
  --file SRC:DEST       a regular file, copied with SRC's permission bits
  --link DEST:TARGET    a symbolic link
  --entrypoint JSON     the config's Entrypoint, a JSON list
  --env K=V             an environment variable (repeatable)
  --user U              the config's User
  --gzip                gzip the layer (a smaller archive; containerd
                        decompresses it when it unpacks the image)
Parent directories are added (0755). Deterministic: the same inputs give the
same bytes (entries sorted, times 0, owner root). Prints the manifest digest
as "manifest sha256:...".
"""
import argparse, gzip, hashlib, io, json, os, sys, tarfile


def tar_bytes(entries):
    """entries: (name, kind, data-or-target, mode), kind "file"|"dir"|"link"."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime, ti.uid, ti.gid = mode, 0, 0, 0
            ti.uname = ti.gname = "root"
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif kind == "link":
                ti.type, ti.linkname = tarfile.SYMTYPE, data
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def js(o):
    return json.dumps(o, separators=(",", ":"), sort_keys=True).encode()


def desc(media, data, **extra):
    d = {"mediaType": media, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
    d.update(extra)
    return d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--name", action="append", required=True)
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--link", action="append", default=[])
    p.add_argument("--entrypoint")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user")
    p.add_argument("--gzip", action="store_true")
    a = p.parse_args()

    items = {}
    for spec in a.file:
        src, _, dest = spec.partition(":")
        if not dest:
            sys.exit(f"mkimage: --file {spec}: want SRC:DEST")
        with open(src, "rb") as f:
            items[dest.strip("/")] = ("file", f.read(), os.stat(src).st_mode & 0o7777)
    for spec in a.link:
        dest, _, target = spec.partition(":")
        if not target:
            sys.exit(f"mkimage: --link {spec}: want DEST:TARGET")
        items[dest.strip("/")] = ("link", target, 0o777)
    dirs = set()
    for name in items:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    entries = [(d, "dir", None, 0o755) for d in sorted(dirs) if d not in items]
    entries += [(n, k, d, m) for n, (k, d, m) in sorted(items.items())]
    entries.sort(key=lambda e: e[0])

    layer = tar_bytes(entries)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    media = "application/vnd.oci.image.layer.v1.tar"
    if a.gzip:
        layer = gzip.compress(layer, compresslevel=6, mtime=0)
        media += "+gzip"
    cfg = {"WorkingDir": "/"}
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.env:
        cfg["Env"] = a.env
    if a.user:
        cfg["User"] = a.user
    config = js({
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "metalherd deploy/node-image/oci/mkimage.py"}],
    })
    manifest = js({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": desc("application/vnd.oci.image.config.v1+json", config),
        "layers": [desc(media, layer)],
    })
    index = js({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            desc("application/vnd.oci.image.manifest.v1+json", manifest,
                 platform={"architecture": "amd64", "os": "linux"},
                 annotations={"io.containerd.image.name": n, "org.opencontainers.image.ref.name": n})
            for n in a.name
        ],
    })
    out = [("oci-layout", "file", js({"imageLayoutVersion": "1.0.0"}), 0o644), ("index.json", "file", index, 0o644)]
    for blob in (layer, config, manifest):
        out.append(("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), "file", blob, 0o644))
    with open(a.out, "wb") as f:
        f.write(tar_bytes(out))
    print("manifest sha256:" + hashlib.sha256(manifest).hexdigest())


main()
