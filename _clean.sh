#!/usr/bin/env bash
# Removes the results, checkpoints and logs of the default locations, and nothing else.
cd "$(dirname "$0")"
rm -rf checkpoints logs results.txt
