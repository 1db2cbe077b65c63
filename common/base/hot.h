#pragma once
// GG_HOT marks a function that every hooked allocation or free runs, or every block event of the tensor
// view (c10's report of a block, its stack recalled or keyed: shim/torch, shim/stacks, shim/python). GCC puts such
// functions in .text.hot, which the linker gathers in one place, so the hot path spans a few pages of code rather than
// one or two in each source file (a native block event's: 14 pages before the view's path was marked, 7 after). The
// driver's call evicts the caller's caches and TLB entries: each page and line the shim touches after it is a likely
// miss, and those misses are most of the shim's cost on the GPU machine (tests/bench/footprint.py counts them;
// BENCHMARKS.md). Only for functions on that path: everything else marked hot would dilute it.
#define GG_HOT __attribute__((hot))
