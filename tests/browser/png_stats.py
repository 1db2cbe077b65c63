#!/usr/bin/env python3
"""Pixel statistics of a PNG screenshot, with only the standard library (no PIL on the test machines).

    png_stats.py FILE [R,G,B[,TOLERANCE]]

Prints one line: "width height distinct_colours busy_fraction near_count", where busy_fraction is the
share of pixels that differ from the most common colour (the page background) and near_count the
number of pixels within TOLERANCE (default 40, per channel) of R,G,B when given. Reads 8-bit RGB/RGBA,
non-interlaced: what Chromium's --screenshot writes.
"""
import struct
import sys
import zlib
from collections import Counter


def read_png(path):
    data = open(path, 'rb').read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise SystemExit(f'{path}: not a PNG')
    pos, idat, hdr = 8, b'', None
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            hdr = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat += body
        elif kind == b'IEND':
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise SystemExit(f'{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})')
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = read_png(sys.argv[1])
    colours = Counter()
    for line in rows:
        for x in range(0, len(line), bpp):
            colours[line[x:x + 3]] += 1
    total = w * h
    background = colours.most_common(1)[0][1]
    near = 0
    if len(sys.argv) > 2:
        parts = [int(v) for v in sys.argv[2].split(',')]
        r, g, b = parts[:3]
        tol = parts[3] if len(parts) > 3 else 40
        near = sum(n for c, n in colours.items() if abs(c[0] - r) <= tol and abs(c[1] - g) <= tol and abs(c[2] - b) <= tol)
    print(w, h, len(colours), f'{(total - background) / total:.4f}', near)


main()
