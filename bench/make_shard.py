"""Writes a token shard in llm.c's format (header of 256 int32: magic
20240520, version 1, count; then uint16 tokens) holding uniformly random
tokens below a vocabulary size. Benchmark input only: throughput does not
depend on the text.

usage: make_shard.py OUT.bin VOCAB NTOKENS [SEED]"""
import sys

import numpy as np


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) == 5 else 0
    if not 0 < vocab <= 65536 or n <= 0:
        sys.exit(f"make_shard.py: vocab {vocab} must be in (0, 65536] and tokens {n} positive")
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, n)
    tokens = np.random.default_rng(seed).integers(0, vocab, size=n, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
