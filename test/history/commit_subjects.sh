#!/usr/bin/env bash
# Fails when a commit made after the rule began has a subject over 72
# characters: the subject names the change, the body carries the reasoning
# and the numbers (doc/design.md, "Commits").  Usage: commit_subjects.sh BASE
set -u
base=$1
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "commit_subjects: not a git checkout, skipped"; exit 0
fi
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "commit_subjects: $base not in this clone's history (shallow?), skipped"; exit 0
fi
bad=$(git log --no-merges --format='%h %s' "$base..HEAD" | awk '{ s = $0; sub(/^[^ ]+ /, "", s); if (length(s) > 72) print }')
if [ -n "$bad" ]; then
  echo "commit_subjects: subjects over 72 characters since $base:"
  printf '%s\n' "$bad"
  exit 1
fi
echo "commit_subjects: $(git rev-list --no-merges --count "$base..HEAD") commits since $base, all subjects <= 72 characters"
