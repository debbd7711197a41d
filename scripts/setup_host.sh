#!/usr/bin/env bash
# Host packages for kvbed (placeholder until the VM testbed lands: nothing needed yet).
set -euo pipefail
exit 0
