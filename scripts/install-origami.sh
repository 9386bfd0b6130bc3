#!/usr/bin/env bash
# Build rocm-origami (AMD's analytic GEMM model) from source into $PYTHON's environment (Debian 12).
# PyPI has only its sdist; it needs Debian's HIP and rocm-cmake packages, and runs on the CPU.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VERSION=0.0.3

if "$PYTHON" -c "import origami" >/dev/null 2>&1; then
  echo "install-origami: origami already importable by $PYTHON"
  exit 0
fi
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  echo "install-origami: $PYTHON has no pip; point PYTHON at a virtual environment's python" >&2
  exit 1
fi

# HIP headers and runtime (find_package(hip), and the extension links libamdhip64), ROCm's CMake
# modules, a C++ compiler, git (Origami's CMake requires it), and Python's headers if missing.
packages=(rocm-cmake libamdhip64-dev hipcc g++ git)
py_include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ ! -f "$py_include/Python.h" ]; then
  packages+=("python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev")
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Origami looks for ROCmCMakeBuildTools (rocm-cmake >= 6) and otherwise git-fetches rocm-cmake from
# GitHub. Debian's rocm-cmake 5.4 has the same modules in /usr/share/rocm/cmake: hand FetchContent a
# source tree laid out the way Origami expects, and forbid all other fetches (nanobind then comes from
# pip's build environment). Pip's CMake 4 needs the policy floor for HIP's old cmake_minimum_required.
if [ ! -d /usr/share/rocm/cmake ]; then
  echo "install-origami: /usr/share/rocm/cmake is missing; is Debian's rocm-cmake installed?" >&2
  exit 1
fi
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/share/rocmcmakebuildtools"
ln -s /usr/share/rocm/cmake "$shim/share/rocmcmakebuildtools/cmake"

CMAKE_PREFIX_PATH=/usr \
CMAKE_ARGS="-DFETCHCONTENT_SOURCE_DIR_ROCM-CMAKE=$shim -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5" \
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  "$PYTHON" -m pip install --no-binary rocm-origami "rocm-origami==$VERSION"

"$PYTHON" -c "
import origami
hw = origami.get_hardware_for_arch(origami.architecture_t.gfx942, 304, 64 * 1024, 4 * 1024 * 1024, 2100000)
print(f'install-origami: origami {origami.__version__} works (gfx942 model: {hw.N_CU} CUs at {hw.compute_clock_ghz} GHz)')
"
