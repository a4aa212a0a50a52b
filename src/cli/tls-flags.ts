/** The TLS and ACME flag checks of the server commands (api, sidecar, proxy): exit 2 naming the flag. */
import { FlagError, type Config } from './flags.js';
import { checkAcme } from '../process/options.js';
import { errorMessage } from '../base/util/option-error.js';

/**
 * Flag checks done before anything starts (exit 2 naming the flag): the library's ACME checks
 * (checkAcme, src/process/options.ts), printed as flags. File problems are found when the provider is
 * built (exit 1 naming the file).
 */
export function checkTlsFlags(config: Config): void {
  // The command line says more than the library when the allow-list is missing: how to write it, and why it is required.
  if (config.enable_acme && !config.enable_tls && config.acme_hosts.length === 0) {
    throw new FlagError(
      '--enable_acme needs --acme_hosts=host[,host...]: the names this server may get certificates for ' +
        '(without an allow-list any client could make it order certificates for any name)',
    );
  }
  try {
    checkAcme({
      enableTls: config.enable_tls,
      enableAcme: config.enable_acme,
      acmeHosts: config.acme_hosts,
      acmeHttpPort: config.acme_http_port,
      acmeDirectory: config.acme_directory,
      acmeEmail: config.acme_email,
    });
  } catch (err) {
    throw new FlagError(errorMessage(err, 'flag'));
  }
}
