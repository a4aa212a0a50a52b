/**
 * The standard output and error of the short CLI commands (docs/cli.md "Output and exit status").
 * Writes to a pipe are asynchronous on POSIX: a command's output reaches the reader only after the
 * process has waited for it, so every short command ends through `exit`, which waits until stdout
 * and stderr have handed their last byte to the kernel. A reader that goes away (EPIPE, as with
 * `| head`) ends the command at once and quietly with 141, the status a process killed by SIGPIPE
 * shows; any other write error on stdout (a full disk) is said on stderr and exits 1.
 */

/** Exit status when stdout's reader went away: 128 + SIGPIPE, as the shell reports for `yes | head`. */
export const BROKEN_PIPE_EXIT = 141;

export interface CliOutput {
  out: (text: string) => void;
  err: (text: string) => void;
  /** Resolves once stdout can take more (a long stream waits here, so a slow reader bounds its memory). */
  drain: () => Promise<void>;
  /** Waits until stdout and stderr are written, then exits with `code`. */
  exit: (code: number) => Promise<never>;
  /** Gives stdout and stderr back to their defaults (a server command keeps its own handling). */
  detach: () => void;
}

type Stream = NodeJS.WriteStream;

/** Resolves when everything written so far to `stream` has been handed over (or the stream failed). */
function flushed(stream: Stream): Promise<void> {
  if (stream.destroyed || stream.writableLength === 0) return Promise.resolve();
  // Write callbacks run in order: the empty write's callback runs after every earlier write is done.
  return new Promise((resolve) => stream.write('', () => resolve()));
}

export function cliOutput(stdout: Stream = process.stdout, stderr: Stream = process.stderr): CliOutput {
  /** Ends the command for a failed stdout; a file's write error is known at once (stream.errored), before its event. */
  const failed = async (e: NodeJS.ErrnoException): Promise<never> => {
    if (e.code === 'EPIPE') process.exit(BROKEN_PIPE_EXIT);
    if (!stderr.destroyed) stderr.write(`mesh: cannot write the output: ${e.message}\n`);
    await flushed(stderr);
    process.exit(1);
  };
  const onStdoutError = (e: NodeJS.ErrnoException) => void failed(e);
  // A stderr nobody reads is not a reason to stop: what it would have said is lost, stdout goes on.
  const onStderrError = () => {};
  stdout.on('error', onStdoutError);
  stderr.on('error', onStderrError);
  return {
    out: (text) => {
      if (!stdout.destroyed) stdout.write(text);
    },
    err: (text) => {
      if (!stderr.destroyed) stderr.write(text);
    },
    drain: () => (stdout.writableNeedDrain && !stdout.destroyed ? new Promise((resolve) => stdout.once('drain', resolve)) : Promise.resolve()),
    exit: async (code) => {
      await Promise.all([flushed(stdout), flushed(stderr)]);
      if (stdout.errored) return failed(stdout.errored);
      process.exit(code);
    },
    detach: () => {
      stdout.removeListener('error', onStdoutError);
      stderr.removeListener('error', onStderrError);
    },
  };
}
