#!/bin/sh
echo "bazel coverage needs Bazel's remote_coverage_tools, which this offline stand-in" >&2
echo "(examples/bazel/offline) does not have: point @remote_coverage_tools at them" >&2
exit 1
