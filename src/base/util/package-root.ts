/** Where the mesh package lives on disk (proto/, src/fronts/dashboard/ and package.json are read from it). */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

/** The package root, found by walking up from this file (works from src/ and from dist/src/). */
export function packageRoot(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'proto'))) return (cached = dir);
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find the mesh package root (package.json next to proto/)');
    dir = parent;
  }
}
