#!/usr/bin/env bash
# usage: run.sh NAME CONFIG SEEDS(e.g. 100-139)
set -e
name=$1; cfg=$2; a=${3%-*}; b=${3#*-}
cd /work/main
out=/tmp/tune2/$name-$a-$b
rm -rf $out
target/release/recur-bench train --config $cfg --update fused --seed $(seq -s, $a $b) --eval-episodes 100 --out $out > $out.jsonl 2>$out.err
python3 /tmp/tune2/stat.py $out
