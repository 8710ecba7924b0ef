#!/usr/bin/env python3
"""Reads the wrapper code of AOTInductor packages made by export.py and fails
if a package allocates a cache-sized buffer or copies the cache
(docs/aoti.md; ctest's aoti_in_place).

usage: check_in_place.py PACKAGE.pt2 [...]

The cache buffers are the package's last 2 * num_layers inputs, [max_batch,
kv_heads, capacity + 1, head_dim] each (the fingerprint in its metadata says
which). In the generated wrapper (data/aotinductor/model/*.wrapper.cpp):

- no buffer may be allocated (aoti_torch_empty_strided) with a cache layer's
  slot count, capacity + 1, as a dimension: only the cache has that many
  slots, so such a buffer would be a copy of a layer (or of a batch of it);
- no line may pass a cache input to a copy or clone;
- every cache input must be handed to statickv::cache_write (the proxy
  executor call) itself, so the write lands in the caller's buffer.

The same checks run first on a made-up wrapper that copies its cache, which
they must reject, so this test can fail.
"""

import json
import re
import sys
import zipfile

INPUT_NAME = re.compile(r'inputs_info_\[(\d+)\]\.name = "(\w+)";')
INT_ARRAY = re.compile(r"int64_t (int_array_\d+)\[\] = \{([^}]*)\};")
ALLOC = re.compile(r"aoti_torch_empty_strided\((\d+), (int_array_\d+),")
PROXY_CALL = re.compile(r"aoti_torch_proxy_executor_call_function\((.*)\);")


def problems(wrapper, metadata):
    """What in `wrapper` (the generated C++) allocates or copies the cache."""
    layers = int(metadata["statickv.num_layers"])
    slot_counts = {int(c) + 1 for c in metadata["statickv.capacities"].split(",")}
    names = dict((int(i), n) for i, n in INPUT_NAME.findall(wrapper))
    inputs = [names[i] for i in sorted(names)]
    if len(inputs) < 2 * layers:
        return [f"expected at least {2 * layers} inputs (the cache buffers) but found {len(inputs)}"]
    cache = inputs[-2 * layers:]
    arrays = {name: [d.strip().rstrip("L") for d in dims.split(",")]
              for name, dims in INT_ARRAY.findall(wrapper)}
    found = []
    for rank, array in ALLOC.findall(wrapper):
        dims = arrays.get(array, [])
        if any(d.isdigit() and int(d) in slot_counts for d in dims):
            found.append(f"allocates a cache-sized buffer [{', '.join(dims)}] ({array})")
    for line in wrapper.splitlines():
        for name in cache:
            if re.search(rf"\b{name}\b", line) and re.search(r"copy_|clone", line):
                found.append(f"copies cache input {name}: {line.strip()}")
    written = set()
    for args in PROXY_CALL.findall(wrapper):
        written.update(n for n in cache if re.search(rf"\b{n}\b", args))
    for name in cache:
        if name not in written:
            found.append(f"cache input {name} is never passed to statickv::cache_write itself")
    return found


def self_test():
    """A wrapper that clones its one layer's keys and writes the clone must fail."""
    metadata = {"statickv.num_layers": "1", "statickv.capacities": "40"}
    fake = "\n".join([
        'inputs_info_[0].name = "arg0_1";',
        'inputs_info_[1].name = "arg1_1";',
        'inputs_info_[2].name = "arg2_1";',
        "static constexpr int64_t int_array_3[] = {4L, 2L, 41L, 16L};",
        "aoti_torch_empty_strided(4, int_array_3, int_array_4, dtype, device, 0, &buf0_handle);",
        "aoti_torch_copy_(buf0, arg1_1, 0);",
        "aoti_torch_proxy_executor_call_function(proxy, 0, 0, x, 5, {buf0, arg2_1}.data());",
    ])
    found = problems(fake, metadata)
    expected = ("allocates a cache-sized buffer", "copies cache input arg1_1",
                "arg1_1 is never passed")
    missed = [e for e in expected if not any(e in f for f in found)]
    if missed:
        raise SystemExit(f"check_in_place.py self-test: the checks missed {missed}: {found}")


def check(package):
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        wrappers = [n for n in names if n.endswith(".wrapper.cpp") and "/aotinductor/model/" in n]
        metas = [n for n in names if n.endswith(".wrapper_metadata.json")]
        if len(wrappers) != 1 or len(metas) != 1:
            return [f"expected one wrapper.cpp and one wrapper_metadata.json, got {wrappers} {metas}"]
        wrapper = archive.read(wrappers[0]).decode()
        metadata = json.loads(archive.read(metas[0]))
    if "statickv.capacities" not in metadata:
        return ["no statickv fingerprint in the metadata: not made by examples/aoti/export.py"]
    return problems(wrapper, metadata)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {sys.argv[0]} PACKAGE.pt2 [...]")
    self_test()
    failed = False
    for package in sys.argv[1:]:
        found = check(package)
        for f in found:
            print(f"{package}: {f}")
        if not found:
            print(f"{package}: writes its cache in place (no cache-sized buffer, no copy)")
        failed = failed or bool(found)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
