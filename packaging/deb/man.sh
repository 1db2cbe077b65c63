#!/usr/bin/env bash
# The gpuguard(1) man page, made from the command's own help (`gpuguard help`, each `help COMMAND`,
# `help variables`), so that it says what the command says. usage: man.sh GPUGUARD VERSION > gpuguard.1
set -euo pipefail
cli=$1 version=$2
# Text as roff: backslashes doubled, a line starting with . or ' escaped, each line kept as it is.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
cat <<EOF
.TH GPUGUARD 1 "" "gpuguard $version" "User Commands"
.SH NAME
gpuguard \- a GPU memory quota inside a container, and an explanation of every CUDA out-of-memory
.SH SYNOPSIS
.B gpuguard
.I COMMAND
[\fIOPTIONS\fR]
.SH DESCRIPTION
.nf
EOF
"$cli" help | roff
for name in $("$cli" help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p'); do
  [[ $name == help ]] && continue
  printf '.fi\n.SH "GPUGUARD %s"\n.nf\n' "${name^^}"
  "$cli" help "$name" | roff
done
printf '.fi\n.SH ENVIRONMENT\n.nf\n'
"$cli" help variables | roff
cat <<EOF
.fi
.SH FILES
.TP
.I /usr/lib/gpuguard/libgpuguard.so
the LD_PRELOAD shim that \fBgpuguard run\fR puts first in LD_PRELOAD, with its libunwind.so.8 beside it
.TP
.I /usr/include/gpuguard/gpuguard.h
the C API (gpuguard_report, gpuguard_phase)
.SH SEE ALSO
/usr/share/doc/gpuguard/README.md
EOF
