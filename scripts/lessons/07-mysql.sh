#!/usr/bin/env bash
# Lesson 7: the MySQL lock as it ships, without its local queue, without its semaphore,
# and the version lock.
# Needs: make services (MariaDB)
scripts/demo.sh mysql mysql+no-local-queue mysql+no-semaphore mysql-version
echo "scripts/demo.sh exited with code $?"
