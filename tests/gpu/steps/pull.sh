#!/usr/bin/env bash
# Pull mode: wsyncd copies the trainer's tensors itself (CUDA IPC of torch's allocations); sources
# released after each version and mapped again by the next; a flat parameter buffer broadcast in
# place with no copy; gathered DTensors copied by the client, so wsyncd maps nothing freed. Left
# to the group (the default), a broadcast group's push is pulled; the client holds the pulled
# parameters' storages for the next push and lets go of temporaries as soon as they are dropped.
source tests/gpu/lib/common.sh
source tests/gpu/lib/policy.sh
gpu_step pull "pull mode: wsyncd copies the trainer's tensors itself"
start_policy
policy_push pull.log 120 --versions 3 --version-prefix pull- --pull
policy_push pull.log 120 --versions 2 --version-prefix pull-release- --pull --release-sources
policy_push pull.log 120 --versions 2 --version-prefix pull-flat- --pull --flat
policy_push pull.log 120 --versions 1 --version-prefix pull-dtensor- --pull --dtensor
policy_push pull.log 120 --versions 2 --version-prefix pull-default- --expect-pulled
policy_push pull.log 120 --versions 2 --version-prefix pull-temporaries- --temporaries \
  --expect-pulled
alive $policy_wsyncd wsyncd
end_step
