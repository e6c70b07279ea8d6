-- Which token registered each worker (docs/deploy.md "Tokens"): a tag
-- derived from the token (never the token), so a worker's polls, replies
-- and leaving are refused under any other token, whichever server of the
-- store they reach. '' for a worker registered on a server without tokens.
ALTER TABLE workers ADD COLUMN owner TEXT NOT NULL DEFAULT '';
