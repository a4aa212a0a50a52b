/** One dynamic route table, for admin /routes. */
export interface RouteTableDump {
  routeConfigName: string;
  versionInfo: string;
  /** Any JSON-serialisable description of the table. */
  table: unknown;
}
