#!/bin/sh
# A host-discovery script for accordrun's elastic mode (docs/elastic.md):
#
#   accordrun --min-np 1 --max-np 4 --host-discovery-script examples/discover_hosts.sh \
#       python examples/pytorch_elastic.py
#
# accordrun runs it about once a second and reads the hosts that may run
# ranks now, one "host:slots" per line; a host that disappears from the list
# is removed from the job at its next commit, a new one is added. A real
# script asks the cluster's scheduler or reads a file that an operator edits;
# this one offers two slots on this machine.
echo "localhost:2"
