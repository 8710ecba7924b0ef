#!/usr/bin/env bash
# On the CPU machine: prepares .devdeps/ for benchmarks/gpu/run_gpu.sh, which
# runs on a GPU machine that has PyTorch (LibTorch), CUDA, CMake and ninja
# but no fmt, Catch2 or nlohmann-json, and no network.
#
#   bash benchmarks/gpu/prep.sh [--hf-wheels 3.11,3.12,3.13]
#
# 1. ../shared/tools/device-prep.sh: Debian's fmt and Catch2 unpacked into
#    .devdeps/, and .devdeps/gpu-build.sh (configure + build into build-gpu/).
# 2. Debian's nlohmann-json3-dev unpacked there too (the reference decoder
#    and every benchmark, which writes its results with it, need it; see
#    docs/gpu.md).
# 3. With --hf-wheels: wheels of transformers and what it imports (pinned to
#    this checkout's .venv versions, numpy and torch's own dependencies left
#    out) for the listed Python versions, into .devdeps/wheels, so
#    run_gpu.sh can install transformers there if its Python lacks it.
#    About 28 MB plus 4 MB per extra Python version; the working tree and
#    everything carried must stay under 64 MiB.
#
# Then run on the GPU machine (device tool): carry [".devdeps"], command
#   bash benchmarks/gpu/run_gpu.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
pyvers=""
while (($#)); do
  case "$1" in
    --hf-wheels) pyvers=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prep.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done

tools="$root/../shared/tools"
[ -x "$tools/device-prep.sh" ] || tools=/work/shared/tools
bash "$tools/device-prep.sh"

(cd .devdeps && apt-get download nlohmann-json3-dev >/dev/null 2>&1 ||
   { apt-get update >/dev/null && apt-get download nlohmann-json3-dev >/dev/null; }
 dpkg -x nlohmann-json3-dev_*.deb . && rm -f nlohmann-json3-dev_*.deb)
rm -rf .devdeps/usr/share/doc
echo "nlohmann-json: $(ls .devdeps/usr/share/cmake 2>/dev/null | tr '\n' ' ')"

if [ -n "$pyvers" ]; then
  py="$root/.venv/bin/python"
  # What `import transformers` and its generate() need, at this checkout's
  # versions; torch brings filelock, fsspec and typing_extensions itself.
  names=(transformers huggingface_hub tokenizers safetensors regex pyyaml tqdm packaging typer
         click rich shellingham markdown_it_py mdurl pygments annotated_doc hf_xet httpx2
         httpcore2 h11 anyio idna truststore pydantic pydantic_core annotated_types
         typing_inspection)
  pins=()
  for n in "${names[@]}"; do
    v=$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$n" 2>/dev/null) ||
      { echo "prep.sh: $n is not installed in .venv; skipped"; continue; }
    pins+=("$n==$v")
  done
  mkdir -p .devdeps/wheels
  IFS=, read -r -a versions <<< "$pyvers"
  for v in "${versions[@]}"; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$v" \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .devdeps/wheels "${pins[@]}" ||
      echo "prep.sh: no wheels for Python $v (transformers 5.24 needs >= 3.11); skipped"
  done
  echo "wheels: $(ls .devdeps/wheels | wc -l) files, $(du -sh .devdeps/wheels | cut -f1)"
fi
du -sh .devdeps
echo "working tree + .devdeps (must stay under 64 MiB):"
{ git ls-files -z --cached --others --exclude-standard | du -ch --files0-from=- 2>/dev/null | tail -1; du -sh .devdeps; }
