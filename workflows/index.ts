export * from './agentRun';
export * from './agentEval';
