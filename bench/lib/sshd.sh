# Sourced by the bench scripts: a loopback sshd on a free port with its own host key, accepting a
# fresh client key; stopped when the script exits. Needs $WORK; sets PORT, USER_NAME, SSH_OPTS
# (the options a plain `ssh` needs to reach it) and writes $WORK/known_hosts.
mkdir -p "$WORK" /run/sshd
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -f "$WORK"/host_key* "$WORK"/client_key*
ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/client_key"
cat > "$WORK/sshd_config" <<CONF
Port $PORT
ListenAddress 127.0.0.1
HostKey $WORK/host_key
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/client_key.pub
StrictModes no
UsePAM no
PasswordAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
MaxSessions 64
MaxStartups 64
LogLevel ERROR
CONF
/usr/sbin/sshd -D -e -f "$WORK/sshd_config" 2>"$WORK/sshd.log" &
SSHD=$!
trap 'kill $SSHD 2>/dev/null || true' EXIT
for _ in $(seq 150); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$WORK/host_key.pub")" > "$WORK/known_hosts"
USER_NAME=$(id -un)
SSH_OPTS=(-o "UserKnownHostsFile=$WORK/known_hosts" -o GlobalKnownHostsFile=/dev/null -o BatchMode=yes
  -o IdentitiesOnly=yes -i "$WORK/client_key")

# The inventory entry (indented for `hosts:`) of one host reaching that sshd; $SSH_EXTRA adds
# `Key: value` entries to its ssh_options.
host_entry() {
  cat <<YAML
  $1:
    address: 127.0.0.1
    port: $PORT
    user: $USER_NAME
    identity_file: $WORK/client_key
    workdir: ${HOST_WORKDIR:-$WORK/work}
    ssh_options: {UserKnownHostsFile: $WORK/known_hosts, GlobalKnownHostsFile: /dev/null, IdentitiesOnly: "yes"${SSH_EXTRA:+, $SSH_EXTRA}}
YAML
}
