#!/bin/sh
# tools/ptxas_report.sh - one line per kernel from nvcc's `-Xptxas -v` output:
# registers, spill stores/loads, stack frame, shared memory. Reads the compiler's
# stderr on stdin, e.g.
#   nvcc ... -Xptxas -v -c ops/attention_cuda.cu -o x.o 2>&1 | sh tools/ptxas_report.sh
# A kernel with spills is a performance bug in a hot path: the report flags it.
awk '
/Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); fn = substr($0, RSTART + 1, RLENGTH - 2); next }
/bytes stack frame/ { split($0, a, ","); stack = a[1]; sub(/.*info    : /, "", stack); st = a[2]; ld = a[3]; next }
/Used [0-9]+ registers/ {
    match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15);
    smem = "0"; if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH - 11);
    print fn "\t" regs "\t" smem "\t" stack "," st "," ld
}' | c++filt | awk -F'\t' '{ flag = ($4 ~ / [1-9][0-9]* bytes spill/) ? "  <-- SPILLS" : "";
    printf "%-100.100s regs %3s smem %6s | %s%s\n", $1, $2, $3, $4, flag }'
