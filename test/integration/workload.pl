# workload.pl — hash/regex/string workload for the LD_PRELOAD comparison.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my $seed = 12345;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

my %h;
my @words;
for my $i (0 .. 99999) {
    my $w = join '', map { chr(97 + rnd() % 26) } 1 .. (1 + rnd() % 10);
    push @words, $w;
    push @{ $h{$w} }, $i;
}
my $text = join ' ', @words;
my %count;
$count{$1}++ while $text =~ /\b([a-z]{3})[a-z]*\b/g;
(my $sub = $text) =~ s/([aeiou])([a-z])/$2$1/g;
my @sorted = sort { length($a) <=> length($b) or $a cmp $b } keys %h;
my @split = split /e+/, $text;
my %inv = map { $_ => scalar @{ $h{$_} } } @sorted;
delete $h{$_} for grep { /^[a-m]/ } @sorted;
my $joined = join ',', map { "$_=$inv{$_}" } @sorted;
my $ctx = Digest::MD5->new;
$ctx->add($text, $sub, $joined, join(';', map { "$_:$count{$_}" } sort keys %count));
$ctx->add(scalar(@split), scalar(keys %h));
printf "keys %d left %d tri %d split %d\n", scalar(@sorted), scalar(keys %h), scalar(keys %count), scalar(@split);
print "digest ", $ctx->hexdigest, "\n";
