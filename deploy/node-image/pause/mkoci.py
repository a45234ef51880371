#!/usr/bin/env python3
"""Write an OCI image-layout archive (what `ctr images import` reads) holding
one image: a single layer with /pause, Entrypoint ["/pause"].

Usage: mkoci.py PAUSE_BINARY OUT.tar NAME...
Every NAME (a full reference, e.g. registry.k8s.io/pause:3.10.1) is one
index.json entry pointing at the same manifest, annotated with
io.containerd.image.name (what containerd's importer uses first) and
org.opencontainers.image.ref.name. Deterministic: same binary, same bytes.
"""
import hashlib, io, json, sys, tarfile

binary, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
assert names, "at least one image name"


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, 0
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def js(o):
    return json.dumps(o, separators=(",", ":"), sort_keys=True).encode()


def desc(media, data, **extra):
    d = {"mediaType": media, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
    d.update(extra)
    return d


layer = tar_bytes([("pause", open(binary, "rb").read(), 0o755)])
config = js({
    "architecture": "amd64",
    "os": "linux",
    "config": {"Entrypoint": ["/pause"], "User": "65535:65535", "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    "history": [{"created_by": "metalherd deploy/node-image/build: static pause.c"}],
})
manifest = js({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": desc("application/vnd.oci.image.config.v1+json", config),
    "layers": [desc("application/vnd.oci.image.layer.v1.tar", layer)],
})
index = js({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        desc("application/vnd.oci.image.manifest.v1+json", manifest,
             platform={"architecture": "amd64", "os": "linux"},
             annotations={"io.containerd.image.name": n, "org.opencontainers.image.ref.name": n})
        for n in names
    ],
})
entries = [("oci-layout", js({"imageLayoutVersion": "1.0.0"}), 0o644), ("index.json", index, 0o644)]
for blob in (layer, config, manifest):
    entries.append(("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob, 0o644))
with open(out, "wb") as f:
    f.write(tar_bytes(entries))
print("manifest sha256:" + hashlib.sha256(manifest).hexdigest())
