#!/bin/bash
# tools/sass_listing.sh - the SASS of an sm_90a cubin with an older nvdisasm, on a machine without a GPU.
#
# This machine's CUDA 13 has nvcc and ptxas but no nvdisasm or cuobjdump. The nvdisasm
# of Debian bookworm's non-free nvidia-cuda-toolkit package (CUDA 11.8) decodes sm_90
# SASS, but refuses the cubins nvcc 13 writes: their ELF header says ABI version 8, whose
# e_flags hold the SM number in bits 8-15. This rewrites a copy of the header into the
# version-7 form it reads (ABI byte 7; e_flags = SM | SM << 16 | 64-bit addresses |
# unified texture mode) and lists the code. Instructions that nvdisasm 11.8 does not know
# (sm_90's VIMNMX integer min/max, at least) are left out of its listing: their offsets
# are missing, and this prints how many such gaps there are, so that counts taken from
# the listing are known to be short by that much. For one kernel alone, build its cubin
# with tools/kernel_cubin.sh; tools/sass_waits.py reads the listing with the cubin.
#
#   tools/sass_listing.sh IN.cubin OUT.txt      (nvdisasm from $NVDISASM, else PATH)
#
# Getting that nvdisasm (about 84 MB, nothing installed):
#   echo 'deb http://deb.debian.org/debian bookworm non-free' > /etc/apt/sources.list.d/nf.list
#   apt-get update && apt-get download nvidia-cuda-toolkit && dpkg -x nvidia-cuda-toolkit_*.deb /opt/nv
#   rm /etc/apt/sources.list.d/nf.list; export NVDISASM=/opt/nv/usr/bin/nvdisasm
set -euo pipefail
if [ $# -ne 2 ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
in=$1
out=$2
nvd=${NVDISASM:-$(command -v nvdisasm || true)}
if [ -z "$nvd" ] || [ ! -x "$nvd" ]; then
    echo "sass_listing: no nvdisasm (set NVDISASM; this script's header says where to get one)" >&2
    exit 1
fi
tmp=$(mktemp --suffix=.cubin)
trap 'rm -f "$tmp"' EXIT
python3 - "$in" "$tmp" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
if b[:4] != b"\x7fELF" or len(b) < 0x34:
    sys.exit("sass_listing: %s is not an ELF cubin" % sys.argv[1])
if b[8] == 8:  # ABI version 8: SM in bits 8-15 of e_flags
    sm = (struct.unpack_from("<I", b, 0x30)[0] >> 8) & 0xFF
    b[8] = 7
    struct.pack_into("<I", b, 0x30, sm | (sm << 16) | 0x400 | 0x100)
open(sys.argv[2], "wb").write(b)
PY
if ! "$nvd" -c "$tmp" > "$out"; then
    echo "sass_listing: $nvd could not read $in" >&2
    exit 1
fi
python3 - "$out" <<'PY'
import re, sys
prev, gaps, missing, n = None, 0, 0, 0
for line in open(sys.argv[1]):
    if line.startswith("//") and ".text." in line:
        prev = None  # a new function: offsets start again
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+\S", line)
    if not m:
        continue
    off = int(m.group(1), 16)
    n += 1
    if prev is not None and off - prev > 16:
        gaps += 1
        missing += (off - prev) // 16 - 1
    prev = off
print("%s: %d instructions listed, %d left out in %d gaps (unknown to this nvdisasm)" % (sys.argv[1], n, missing, gaps))
PY
