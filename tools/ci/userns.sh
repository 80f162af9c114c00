#!/usr/bin/env bash
# Let bubblewrap make the user namespaces of the pinned build root (oeq_wheels/buildroot.py) on a runner whose
# kernel restricts them: Ubuntu 24.04's AppArmor refuses them to unprivileged programs by default. Elsewhere the
# setting does not exist and nothing is changed.
set -euo pipefail
key=kernel.apparmor_restrict_unprivileged_userns
if [ "$(sysctl -n "$key" 2>/dev/null || echo absent)" = 1 ]; then
  sudo sysctl -w "$key=0"
else
  echo "userns.sh: $key is $(sysctl -n "$key" 2>/dev/null || echo 'not set on this kernel'); nothing to change"
fi
