/** The TLS and ACME flag checks of the server commands (api, sidecar, proxy): exit 2 naming the flag. */
import { FlagError, type Config } from './flags.js';
import { parseAcmeHosts } from '../tls/acme/hosts.js';
import { parseChallengeAddress } from '../tls/acme/challenge-server.js';
import { errorMessage } from '../util/option-error.js';

/**
 * Flag checks done before anything starts (exit 2 naming the flag). File problems are found when
 * the provider is built (exit 1 naming the file).
 */
export function checkTlsFlags(config: Config): void {
  if (!config.enable_acme) return;
  if (config.enable_tls) {
    throw new FlagError('--enable_acme and --enable_tls are exclusive: use certificate files or ACME, not both');
  }
  if (config.acme_hosts.length === 0) {
    throw new FlagError(
      '--enable_acme needs --acme_hosts=host[,host...]: the names this server may get certificates for ' +
        '(without an allow-list any client could make it order certificates for any name)',
    );
  }
  try {
    parseAcmeHosts(config.acme_hosts);
    parseChallengeAddress(config.acme_http_port);
  } catch (err) {
    throw new FlagError(errorMessage(err, 'flag'));
  }
  let url: URL;
  try {
    url = new URL(config.acme_directory);
  } catch {
    throw new FlagError(`invalid value "${config.acme_directory}" for flag --acme_directory: not a URL`);
  }
  if (url.protocol !== 'https:') {
    throw new FlagError(`invalid value "${config.acme_directory}" for flag --acme_directory: an ACME directory is served over https (RFC 8555)`);
  }
  if (config.acme_email !== undefined && !/^[^@\s]+@[^@\s]+$/.test(config.acme_email)) {
    throw new FlagError(`invalid value "${config.acme_email}" for flag --acme_email: not an e-mail address`);
  }
}

