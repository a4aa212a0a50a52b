// Preloaded (--require) into a mesh process run by another Node than the one node_modules was built
// for (the bench's Node 24 rows): better-sqlite3's native build is loaded from BENCH_SQLITE_ADDON,
// a better_sqlite3.node built for this Node, instead of node_modules' own.
'use strict';
const addon = process.env.BENCH_SQLITE_ADDON;
if (addon) {
  const dlopen = process.dlopen;
  process.dlopen = function (module, filename, ...rest) {
    return dlopen.call(this, module, /better_sqlite3\.node$/.test(filename) ? addon : filename, ...rest);
  };
}
