/**
 * Why a listener could not bind, said so that the user can act: the flag (or setting) that named
 * the address and, for an address in use, which process holds the port when this user may see it
 * (Linux: the listening socket in /proc/net/tcp and tcp6, then the process whose file descriptors
 * hold it; a mesh process is named by its command, `mesh dev (pid 4242)`).
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { basename } from 'node:path';
import { printable } from './text.js';

/** The process that listens on TCP `port` (any local address), when /proc shows it to this user. */
export function portHolder(port: number, proc = '/proc'): { pid: number; command: string } | undefined {
  const inodes = new Set<string>();
  for (const table of ['net/tcp', 'net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(`${proc}/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is HEXADDR:HEXPORT; st 0A is LISTEN; the inode is the tenth field.
      if (f.length > 9 && f[3] === '0A' && parseInt(f[1]!.split(':')[1] ?? '', 16) === port) inodes.add(f[9]!);
    }
  }
  if (inodes.size === 0) return undefined;
  let pids: string[];
  try {
    pids = readdirSync(proc).filter((d) => /^\d+$/.test(d));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`${proc}/${pid}/fd`);
    } catch {
      continue; // another user's process, or gone
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`${proc}/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1]!)) return { pid: Number(pid), command: commandOf(`${proc}/${pid}/cmdline`) };
    }
  }
  return undefined;
}

/** `mesh <command>` for a mesh CLI process (node …/cli/main.js api, or the `mesh` bin), else the program's name. */
function commandOf(cmdline: string): string {
  let argv: string[];
  try {
    argv = readFileSync(cmdline, 'utf8').split('\0').filter(Boolean);
  } catch {
    return 'a process';
  }
  const script = argv.findIndex((a, i) => i > 0 && !a.startsWith('-') && (/\/cli\/main\.js$/.test(a) || basename(a) === 'mesh'));
  // Another process's words, printed in our message: no control character passes (printable).
  if (script > 0 && argv[script + 1] && !argv[script + 1]!.startsWith('-')) return `mesh ${printable(argv[script + 1]!)}`;
  return argv[0] ? printable(basename(argv[0])) : 'a process';
}

/**
 * The reason of a failed listen on `address` (HOST:PORT), for a message that already names what
 * listens (`gateway cannot listen on 127.0.0.1:8080: ...`): an address in use says who holds it
 * (when known) and, with `flag`, the flag to change.
 */
export function listenFailure(e: NodeJS.ErrnoException, address: string, flag?: string): string {
  const change = flag ? `, or give another ${flag}` : '';
  if (e.code === 'EADDRINUSE') {
    const port = Number(/:(\d+)$/.exec(address)?.[1]);
    const holder = Number.isInteger(port) && port > 0 ? portHolder(port) : undefined;
    const who = holder ? `${holder.command} (pid ${holder.pid}) listens on port ${port}` : 'another process listens there';
    return `address already in use: ${who}; stop it${change}`;
  }
  if (e.code === 'EADDRNOTAVAIL') return `address not available (no interface of this machine has it)${flag ? `: give another ${flag}` : ''}`;
  if (e.code === 'EACCES') return `permission denied (a port below 1024 needs privileges)${flag ? `: give another ${flag}` : ''}`;
  return e.message;
}
