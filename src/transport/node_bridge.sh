# One connection to a server on a Slurm host's node (node_bridge.rs), run on the login node as
# `sh -c SCRIPT rigrun JOB ADDRESS PORT MARKER`: inside the allocation, bash connects to the
# server as the node sees it, says MARKER once connected, then copies bytes both ways: the
# server's to stdout until the server closes, stdin to the server until rigrun closes it.
# `--unbuffered`: without it srun holds output back until a newline, and an HTTP body need not
# end in one. `--norc`: bash would read ~/.bashrc when it sees SSH's variables.
exec srun --jobid="$1" --overlap --nodes=1 --ntasks=1 --quiet --unbuffered \
  bash --norc --noprofile -c 'exec 3<>"/dev/tcp/$1/$2" || exit 111
printf "%s\n" "$3"
cat <&3 &
cat >&3
kill $! 2>/dev/null
wait' rigrun-bridge "$2" "$3" "$4"
