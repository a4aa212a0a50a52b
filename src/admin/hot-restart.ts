/** The hot-restart version string, shared by admin /hot_restart_version and `mesh --hot-restart-version`. */
export { hotRestartVersion } from './build-info.js';
