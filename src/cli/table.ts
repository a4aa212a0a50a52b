/** The CLI's tables (`mesh ps`, `mesh stat`, `mesh edges`): columns padded to the widest cell (the last one not), two spaces apart. */
export function formatTable(header: readonly string[], rows: readonly string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  return all.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ') + '\n').join('');
}

/** Byte order of two strings: the tables' sort. */
export function byteOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
