export * from './agentRun';
