#!/usr/bin/env bash
# Runs every test of the project: the README's "run all tests" command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
