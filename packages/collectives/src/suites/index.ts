// The `@webshard/collectives/testing` entry: the one collective suite every transport runs, and its
// helpers. Test-only (it imports vitest).
export { createHostBackend } from './host-backend.js';
export type {
  CaseReport,
  ErrorReport,
  FailureScenario,
  RankReport,
  SuiteEnvironment,
  SuiteJob,
} from './suite.js';
export {
  FAILURE_SCENARIOS,
  FAILURE_TIMEOUT_MS,
  killsARank,
  runSuiteJob,
  STALL_LIMIT_MS,
  SUITE_GROUP_OPTIONS,
} from './suite.js';
export type { SuiteTransport } from './transport-suite.js';
export { runTransportSuite } from './transport-suite.js';
export type { TestCertificate } from '../test-support/certificate.js';
export { makeTestCertificate } from '../test-support/certificate.js';
