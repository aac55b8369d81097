#!/usr/bin/env bash
# Start a real one-node SLURM on this machine for the tests marked `slurm` (tests/slurm/): Debian's slurmctld,
# slurmd, slurm-client and munge, a random munge key, a minimal slurm.conf naming this host with its CPUs, then
# munged, slurmctld and slurmd. Idempotent, and quick when SLURM already answers. Needs root (or sudo) and apt;
# where it cannot run, it says why and exits 0: the tests then skip, saying the same.
set -euo pipefail
if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "slurm: up ($(sinfo -h -o '%N %c CPUs %T' | head -1))"
  exit 0
fi
run=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then run="sudo"; else
    echo "slurm: not started (needs root or passwordless sudo); the slurm tests will skip"; exit 0
  fi
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
  || ! command -v munged >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "slurm: not installed and no apt-get here; the slurm tests will skip"; exit 0
  fi
  $run apt-get update -q
  DEBIAN_FRONTEND=noninteractive $run apt-get install -y -q slurmctld slurmd slurm-client munge
fi
host=$(hostname -s)
if ! getent hosts "$host" >/dev/null; then  # slurmctld must resolve the host it runs on
  echo "127.0.0.1 $host" | $run tee -a /etc/hosts >/dev/null
fi
cpus=$(nproc)
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))

# munge: a random key only munge reads, and its daemon running as munge
if [ "$($run stat -c %s /etc/munge/munge.key 2>/dev/null || echo 0)" != 1024 ]; then
  $run dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
$run chown munge:munge /etc/munge/munge.key
$run chmod 400 /etc/munge/munge.key
$run mkdir -p /run/munge /var/log/munge /var/lib/munge
$run chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! pgrep -u munge -x munged >/dev/null; then
  $run runuser -u munge -- /usr/sbin/munged
fi

$run mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/slurm
$run tee /etc/slurm/slurm.conf >/dev/null <<CONF
# written by tests/slurm/setup.sh: one node, this host
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
pgrep -x slurmctld >/dev/null || $run /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || $run /usr/sbin/slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "slurm: up ($(sinfo -h -o '%N %c CPUs %T' | head -1))"
    exit 0
  fi
  sleep 0.5
done
echo "slurm: slurmctld/slurmd did not come up; see /var/log/slurm/"
sinfo || true
exit 1
