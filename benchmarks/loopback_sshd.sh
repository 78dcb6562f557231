# Sourced by benchmarks/gpu_smoke.sh and benchmarks/real_sglang_gpu.sh (not run on its own).
#
#   start_loopback_sshd WORK PORT HOST...   # sets SSHCFG=(--ssh-config WORK/ssh_config)
#
# A real OpenSSH server on 127.0.0.1:PORT for a GPU host image without sshd: Debian 12's
# openssh-server, openssh-sftp-server, openssh-client (for ssh-keygen), libnsl2, libtirpc3 and
# libwrap0 from $DEBS (default ./.debs), unpacked with `dpkg -x` under WORK (nothing is
# installed on /), with `UsePAM no` and `Subsystem sftp internal-sftp`. Root logs in with a
# fresh ed25519 key; the host key goes into WORK/known_hosts, and WORK/ssh_config maps each
# HOST name to the server (StrictHostKeyChecking yes). No `ssh` client is put on PATH, so
# ddprobe resolves the hosts with paramiko's config parser. sshd logs to WORK/sshd.log; stop it
# with stop_loopback_sshd WORK.
start_loopback_sshd() {
  local work=$1 port=$2; shift 2
  local r=$work/openssh lib=$work/sshlib f i
  mkdir -p "$r" "$lib" /run/sshd
  for f in "${DEBS:-.debs}"/*.deb; do dpkg -x "$f" "$r" || return 1; done
  find "$r" \( -name 'libnsl*' -o -name 'libtirpc*' -o -name 'libwrap*' \) -exec cp -a {} "$lib/" \;
  id sshd >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin sshd
  LD_LIBRARY_PATH=$lib "$r/usr/bin/ssh-keygen" -q -t ed25519 -N '' -f "$work/host_ed25519" &&
    LD_LIBRARY_PATH=$lib "$r/usr/bin/ssh-keygen" -q -t ed25519 -N '' -f "$work/client_ed25519" ||
    return 1
  cp "$work/client_ed25519.pub" "$work/authorized_keys"; chmod 600 "$work/authorized_keys"
  cat > "$work/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $work/host_ed25519
PidFile $work/sshd.pid
AuthorizedKeysFile $work/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
PermitRootLogin yes
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
  LD_LIBRARY_PATH=$lib "$r/usr/sbin/sshd" -t -f "$work/sshd_config" || return 1
  LD_LIBRARY_PATH=$lib setsid "$r/usr/sbin/sshd" -D -e -f "$work/sshd_config" \
    2> "$work/sshd.log" < /dev/null &
  for i in $(seq 50); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  echo "sshd: $(LD_LIBRARY_PATH=$lib "$r/usr/sbin/sshd" -V 2>&1 | head -1) on 127.0.0.1:$port"
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$work/host_ed25519.pub")" > "$work/known_hosts"
  cat > "$work/ssh_config" <<EOF
Host $*
  HostName 127.0.0.1
  Port $port
  User root
  IdentityFile $work/client_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $work/known_hosts
  StrictHostKeyChecking yes
EOF
  SSHCFG=(--ssh-config "$work/ssh_config")
}

stop_loopback_sshd() {
  [ -f "$1/sshd.pid" ] && kill "$(cat "$1/sshd.pid")" 2>/dev/null
  return 0
}
