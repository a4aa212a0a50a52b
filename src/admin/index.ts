/** The admin interface: see docs/admin.md. */
export { AdminServer, parseAdminAddress, type AdminReply } from './server.js';
export {
  ServerState,
  type AdminContext,
  type CertificateInfo,
  type RouteTableDump,
  type ServerHealthState,
  type ServerStateOptions,
  type SubjectAltName,
} from './context.js';
export { certificateInfoFromPem } from '../tls/certificate.js';
export { buildInfo, hotRestartVersion, packageVersion, type BuildInfo } from './build-info.js';
