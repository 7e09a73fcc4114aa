-- Armature's trace store: its own user and database, separate from Temporal's `temporal` user.
-- Mounted into the postgres image's /docker-entrypoint-initdb.d by docker-compose.temporal.yml,
-- so it runs once, as the superuser, when the data volume is first initialised.
-- Matches ARMATURE_DB_URL=postgresql+psycopg://armature:armature@postgresql:5432/armature
-- (change the password in both places for anything reachable from outside the machine).
CREATE ROLE armature WITH LOGIN PASSWORD 'armature';
CREATE DATABASE armature OWNER armature;
-- Only its owner (and superusers) may connect to it.
REVOKE ALL ON DATABASE armature FROM PUBLIC;
