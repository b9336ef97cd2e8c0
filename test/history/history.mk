# test/history/history.mk — checks on the repository's history, in make check.
#   check-history  every commit after 657112a (when the rule began) has a
#                  subject of at most 72 characters
.PHONY: check-history
CHECK_TARGETS += check-history
check-history:
	@bash test/history/commit_subjects.sh 657112a
