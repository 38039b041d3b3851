# bash completion for fencectl
_fencectl() {
  local cur prev cmd
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  local commands="run lease advance sign domain status whoami audit verify recover"
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
    return
  fi
  cmd=${COMP_WORDS[1]}
  # After "run ... --" the words belong to the command being run.
  local i
  for ((i = 2; i < COMP_CWORD; i++)); do
    if [ "$cmd" = run ] && [ "${COMP_WORDS[i]}" = "--" ]; then
      COMPREPLY=($(compgen -c -- "$cur"))
      return
    fi
  done
  case "$prev" in
    --mount|-m|--state|-s|--backing|-b)
      COMPREPLY=($(compgen -d -- "$cur"))
      return ;;
    --key|-k|--cacert|--cert)
      COMPREPLY=($(compgen -f -- "$cur"))
      return ;;
    --decision)
      COMPREPLY=($(compgen -W "accepted refused advanced bound unbound declared failed info detected recovered" -- "$cur"))
      return ;;
  esac
  local opts
  case "$cmd" in
    run) opts="--mount --domain --token --acquire --user --etcd --lock --ttl --wait --grace --resync --cacert --cert --key --help" ;;
    lease)
      case "${COMP_WORDS[2]}" in
        acquire) opts="--etcd --lock --ttl --wait --mount --domain --resync --cacert --cert --key" ;;
        keepalive) opts="--etcd --lease --once --cacert --cert --key" ;;
        release) opts="--etcd --lease --cacert --cert --key" ;;
        *) opts="acquire keepalive release --help" ;;
      esac ;;
    advance) opts="--mount --force --help" ;;
    sign) opts="--key --domain --epoch --help" ;;
    domain) opts="add --mount --help" ;;
    status) opts="--mount --json --help" ;;
    whoami) opts="--json --help" ;;
    audit) opts="--mount --state --domain --since --decision --verbose --json --follow --summary --help" ;;
    verify) opts="--state --json --quiet --help" ;;
    recover) opts="--state --floor --backing --json --help" ;;
  esac
  if [[ "$cur" == -* ]] || { [[ "$cmd" == domain || "$cmd" == lease ]] && [ "$COMP_CWORD" -eq 2 ]; }; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -d -- "$cur"))
  fi
}
complete -F _fencectl fencectl
