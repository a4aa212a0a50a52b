/**
 * `mesh completion bash|zsh`: a completion script generated from the command table (help.ts) and
 * the flags (flags.ts): commands, subcommands (`list services`), the flags a command's help lists,
 * and the allowed values of flags with choices (`--lb_policy=<TAB>`); file names for *_file and
 * --config.
 */
import { FLAG_SPECS, type CommandName } from './flags.js';
import { COMMANDS, commandFlags, flagChoices } from './help.js';

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Shell functions shared by bash and zsh (plain POSIX `case`, no arrays). */
function sharedFunctions(): string {
  const specs = FLAG_SPECS as Record<string, { type: string }>;
  const all = Object.keys(specs);
  const flagWords = (names: string[]) => names.map((n) => (specs[n]!.type === 'bool' ? `--${n}` : `--${n}=`)).join(' ');
  const valueFlags = all.filter((n) => specs[n]!.type !== 'bool');
  const fileFlags = all.filter((n) => n.endsWith('_file') || n === 'config' || n === 'acme_cache' || n === 'mesh_home');
  const both = (n: string) => (n.includes('_') ? `--${n}|--${n.replace(/_/g, '-')}` : `--${n}`);

  const valueCases: string[] = [];
  for (const c of COMMANDS) {
    for (const n of all) {
      const own = c.choices?.[n as keyof typeof FLAG_SPECS];
      if (own) valueCases.push(`    ${c.name}:${both(n).replace('|', `|${c.name}:`)}) echo ${q(own.join(' '))} ;;`);
    }
  }
  for (const n of all) {
    const choices = flagChoices(n);
    if (choices) valueCases.push(`    *:${both(n).replace('|', '|*:')}) echo ${q(choices.join(' '))} ;;`);
  }
  for (const n of fileFlags) valueCases.push(`    *:${both(n).replace('|', '|*:')}) echo __files__ ;;`);

  const commandCases = COMMANDS.filter((c) => commandFlags(c.name).length > 0).map((c) => `    ${c.name}) echo ${q(flagWords(commandFlags(c.name as CommandName)))} ;;`);
  const subCases = COMMANDS.filter((c) => c.subcommands).map((c) => `    ${c.name}) echo ${q(c.subcommands!.join(' '))} ;;`);

  return `_mesh_commands() { echo ${q(COMMANDS.map((c) => c.name).join(' '))}; }

# The flags offered after a command (those its help lists); every flag without one.
_mesh_flags() {
  case "$1" in
${commandCases.join('\n')}
    *) echo ${q(flagWords(all) + ' --help --version')} ;;
  esac
}

# The words after a command: list services, completion bash, help api.
_mesh_subcommands() {
  case "$1" in
${subCases.join('\n')}
    help) echo ${q([...COMMANDS.map((c) => c.name), 'flags'].join(' '))} ;;
  esac
}

# _mesh_values COMMAND --flag: the allowed values ("__files__": file names; nothing: free text).
_mesh_values() {
  case "$1:$2" in
${valueCases.join('\n')}
  esac
}

# 0 when the flag takes a value (so "--flag VALUE" is one flag, not a command).
_mesh_takes_value() {
  case "$1" in
    -c|${valueFlags.map(both).join('|')}) return 0 ;;
  esac
  return 1
}
`;
}

export function bashCompletion(): string {
  return `# mesh completion for bash. Install: source <(mesh completion bash)
# or: mesh completion bash > ~/.local/share/bash-completion/completions/mesh
${sharedFunctions()}
_mesh_completion() {
  local cur prev cmd sub i w flag vals
  COMPREPLY=()
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev=""
  [ "$COMP_CWORD" -gt 0 ] && prev="\${COMP_WORDS[COMP_CWORD-1]}"
  cmd=""
  sub=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case "$w" in -*|=) continue ;; esac
    [ "\${COMP_WORDS[i-1]}" = "=" ] && continue
    _mesh_takes_value "\${COMP_WORDS[i-1]}" && continue
    if [ -z "$cmd" ]; then cmd="$w"; elif [ -z "$sub" ]; then sub="$w"; fi
  done

  # The value of a flag: --flag=VALUE in one word, or split at "=" (COMP_WORDBREAKS), or --flag VALUE.
  flag=""
  if [[ "$cur" == --*=* ]]; then
    flag="\${cur%%=*}"
    cur="\${cur#*=}"
    vals="$(_mesh_values "$cmd" "$flag")"
    if [ "$vals" = "__files__" ]; then
      COMPREPLY=($(compgen -f -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$vals" -- "$cur"))
    fi
    COMPREPLY=("\${COMPREPLY[@]/#/$flag=}")
    return 0
  elif [ "$cur" = "=" ] && [[ "$prev" == --* ]]; then
    flag="$prev"
    cur=""
  elif [ "$prev" = "=" ] && [ "$COMP_CWORD" -gt 1 ]; then
    flag="\${COMP_WORDS[COMP_CWORD-2]}"
  elif _mesh_takes_value "$prev"; then
    flag="$prev"
  fi
  if [ -n "$flag" ]; then
    vals="$(_mesh_values "$cmd" "$flag")"
    if [ "$vals" = "__files__" ] || [ "$flag" = "-c" ]; then
      COMPREPLY=($(compgen -f -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$vals" -- "$cur"))
    fi
    return 0
  fi

  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_mesh_flags "$cmd")" -- "$cur"))
    if [ \${#COMPREPLY[@]} -eq 1 ] && [[ "\${COMPREPLY[0]}" == *= ]]; then
      compopt -o nospace 2>/dev/null
    fi
    return 0
  fi
  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "$(_mesh_commands)" -- "$cur"))
  elif [ -z "$sub" ]; then
    COMPREPLY=($(compgen -W "$(_mesh_subcommands "$cmd")" -- "$cur"))
  fi
  return 0
}
complete -F _mesh_completion mesh
`;
}

export function zshCompletion(): string {
  return `#compdef mesh
# mesh completion for zsh. Install: source <(mesh completion zsh)   (after compinit)
# or: mesh completion zsh > "\${fpath[1]}/_mesh"
${sharedFunctions()}
_mesh() {
  local cur prev cmd sub i w flag vals
  cur="\${words[CURRENT]}"
  prev="\${words[CURRENT-1]}"
  cmd=""
  sub=""
  for (( i = 2; i < CURRENT; i++ )); do
    w="\${words[i]}"
    case "$w" in -*) continue ;; esac
    _mesh_takes_value "\${words[i-1]}" && continue
    if [[ -z "$cmd" ]]; then cmd="$w"; elif [[ -z "$sub" ]]; then sub="$w"; fi
  done
  flag=""
  if [[ "$cur" == --*=* ]]; then
    flag="\${cur%%=*}"
    compset -P '*='
  elif _mesh_takes_value "$prev"; then
    flag="$prev"
  fi
  if [[ -n "$flag" ]]; then
    vals="$(_mesh_values "$cmd" "$flag")"
    if [[ "$vals" == "__files__" || "$flag" == "-c" ]]; then
      _files
    elif [[ -n "$vals" ]]; then
      compadd -- \${=vals}
    fi
    return
  fi
  if [[ "$cur" == -* ]]; then
    local -a fl
    fl=(\${=$(_mesh_flags "$cmd")})
    compadd -S '' -- \${(M)fl:#*=}
    compadd -- \${fl:#*=}
    return
  fi
  if [[ -z "$cmd" ]]; then
    compadd -- \${=$(_mesh_commands)}
  elif [[ -z "$sub" ]]; then
    compadd -- \${=$(_mesh_subcommands "$cmd")}
  fi
}
if (( $+functions[compdef] )); then
  compdef _mesh mesh
else
  autoload -Uz compinit && compinit && compdef _mesh mesh
fi
`;
}

export function completionScript(shell: 'bash' | 'zsh'): string {
  return shell === 'zsh' ? zshCompletion() : bashCompletion();
}
