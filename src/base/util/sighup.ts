/**
 * SIGHUP reloads: a file-backed configuration (auth rules, authorization rules, routes) reads its
 * file again on every SIGHUP until the returned function is called.
 */
export function reloadOnSighup(reload: () => unknown): () => void {
  const onHup = () => void reload();
  process.on('SIGHUP', onHup);
  return () => process.off('SIGHUP', onHup);
}
